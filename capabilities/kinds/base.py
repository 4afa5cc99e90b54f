"""What a capability kind provides: its config's rules, its form fields, its executor.

A kind is a folder (`capabilities/kinds/<kind>/`: config.py, form.py, executor.py) whose
`__init__` defines one KindEntry, and one line in `capabilities.kinds.table.KINDS`. Nothing
outside the table branches on the kind.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capabilities.executors.base import OutputStore
from capabilities.executors.secrets import Redactor
from capabilities.netguard import NetGuard
from core.errors import FieldErrors
from runtime.ports import Executor


@dataclass(frozen=True)
class ExecutorParts:
    """What every kind's executor is built from: one guard, one output store, one redactor."""

    guard: NetGuard
    output_store: OutputStore
    redactor: Redactor | None
    stdio: Any = None           # the stdio policy (MCP servers run as local commands)


def unchanged(config: dict) -> dict:
    return config


@dataclass(frozen=True)
class KindEntry:
    kind: str
    # Registered in the browser and the API; False: declared in code and synced (python).
    registered_in_browser: bool
    # Checks a version's config: errors.add("config.<key>", ...) for each problem.
    config_errors: Callable[[FieldErrors, dict, dict[str, Any], Any], None]
    make_executor: Callable[[ExecutorParts], Executor]
    # The capability form's fieldset for the config fields, and the fields (made afresh per form).
    legend: str = ""
    form_fields: Callable[[], dict[str, Any]] = dict
    # Form initial values from a config; the config from cleaned form data over the current
    # config (None: the form does not set it).
    initial: Callable[[dict], dict[str, Any]] = lambda config: {}
    config_from: Callable[[dict[str, Any], dict], dict | None] = lambda data, current: None
    normalized: Callable[[dict], dict] = unchanged
    names_a_server: bool = False    # the capability names an MCP server it is a tool of
    # Said while "Try it" runs a call of this kind (a first call that takes longer, say).
    first_call_note: str = ""

    @property
    def config_field_names(self) -> tuple[str, ...]:
        return tuple(self.form_fields())
