"""Schemathesis over the whole API with every role: no server error, every answer as documented.

Twice: in process (the WSGI application, the test database), and against the production server
(uvicorn serving agentops.asgi, as the README runs it) on loopback with committed data, so the
ASGI router, its planning long-poll front and the real middleware answer too. Each role
authenticates with its own API token. Bounded for CI: AGENTOPS_FUZZ_EXAMPLES examples per
operation and role in process (default 8; about two minutes on two cores for all roles), and
AGENTOPS_LIVE_FUZZ_EXAMPLES against the server (default 3).
"""
from __future__ import annotations

import json
import os
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from core.project_access import grant_role
from runs import services
from runs.worker import engine
from tests.conftest import holding_only

pytestmark = [pytest.mark.slow]
EXAMPLES = int(os.environ.get("AGENTOPS_FUZZ_EXAMPLES", "8"))
LIVE_EXAMPLES = int(os.environ.get("AGENTOPS_LIVE_FUZZ_EXAMPLES", "3"))
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
ROLES = ("anonymous", "nobody", "viewer", "operator", "lead operator", "registry admin", "reviewer")


def _openapi_schema(*, in_process: bool = True):
    from django.core.wsgi import get_wsgi_application
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    spec = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))
    schema = schemathesis.openapi.from_dict(spec)
    if in_process:
        schema.app = get_wsgi_application()
    return schema


@pytest.fixture
def keep_connection():
    """Like Django's test client: requests must not close the connection holding the test's transaction."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world(db, roles, keep_connection):
    """Something behind the ids: a run waiting for plan approval, its approval, the capabilities."""
    from django.contrib.auth.models import User

    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    owner = User.objects.create_user("owner", password="pw-owner-long")
    grant_role(owner, "operator")
    run = services.run_start(owner=owner, goal="Fuzzed", planner="scripted",
                             planner_config={"plans": [[{"capability": "search_documents",
                                                         "arguments": {"q": "travel"}}]]},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             require_plan_approval=True)
    engine.run_advance(run_id=run.pk, worker="fuzz")
    from capabilities.models import Capability
    from runs.models import Approval

    return {"run_id": run.pk, "approval_id": Approval.objects.get(run=run).pk,
            "name": Capability.objects.order_by("name").first().name}


def _headers_for(role: str) -> dict[str, str]:
    from django.contrib.auth.models import User

    from core.tokens import token_create

    if role == "anonymous":
        return {}
    user = User.objects.create_user("fuzz-" + role.replace(" ", "-"), password="pw-fuzz-long-enough")
    if role == "nobody":
        holding_only(user)   # a member of the project with no permission at all (a token acts in a project)
    else:
        grant_role(user, role)
    _, key = token_create(user=user, name="fuzz")
    return {"Authorization": f"Token {key}"}


def _fuzz(schema, world, headers: dict, examples: int, **call) -> tuple[int, int]:
    """Every operation: random ids (mostly 404s), then the ids of real objects, so the answers with a body
    are checked too. Returns the numbers of operations and of requests made."""
    operations = [result.ok() for result in schema.get_all_operations()]
    calls = []
    for operation in operations:
        names = re.findall(r"{(\w+)}", operation.path)
        strategies = [operation.as_strategy()]
        if names and all(name in world for name in names):
            strategies.append(operation.as_strategy(path_parameters={name: world[name] for name in names}))
        for strategy in strategies:
            @hypothesis_settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                                 suppress_health_check=list(HealthCheck))
            @given(case=strategy)
            def check(case):
                calls.append(case.call_and_validate(headers=headers, checks=CHECKS, **call).status_code)

            check()
    return len(operations), len(calls)


@pytest.mark.parametrize("role", ROLES)
def test_the_api_answers_as_documented_for_every_role(role, world):
    operations, calls = _fuzz(_openapi_schema(), world, _headers_for(role), EXAMPLES)
    assert operations > 20 and calls > operations


@pytest.fixture
def live_world(transactional_db, roles, manual_advance):
    """Committed data the server process reads: a finished run with attempts (its long poll answers at once),
    a run waiting for its plan's approval, and the capabilities."""
    from django.contrib.auth.models import User

    from capabilities.kinds.python.sync import python_capabilities_sync
    from capabilities.models import Capability
    from runs.models import Approval, Run

    python_capabilities_sync()
    owner = User.objects.create_user("owner", password="pw-owner-long")
    grant_role(owner, "operator")
    plans = {"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]}
    completion = {"capability": "search_documents", "path": "documents.0.id", "exists": True}
    finished = services.run_start(owner=owner, goal="Fuzzed", planner="scripted", planner_config=plans,
                                  completion=completion)
    while not Run.objects.get(pk=finished.pk).is_finished:
        engine.run_advance(run_id=finished.pk, worker="fuzz")
    waiting = services.run_start(owner=owner, goal="Fuzzed", planner="scripted", planner_config=plans,
                                 completion=completion, require_plan_approval=True)
    engine.run_advance(run_id=waiting.pk, worker="fuzz")
    return {"run_id": finished.pk, "approval_id": Approval.objects.get(run=waiting).pk,
            "name": Capability.objects.order_by("name").first().name}


def test_the_production_server_answers_as_documented_for_every_role(live_world, web_server):
    server = web_server(layout="uvicorn")
    schema = _openapi_schema(in_process=False)
    for role in ROLES:
        operations, calls = _fuzz(schema, live_world, _headers_for(role), LIVE_EXAMPLES, base_url=server.url)
        assert operations > 20 and calls > operations, (role, operations, calls)
