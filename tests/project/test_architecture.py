"""The layout's rules: the runtime core stays pure, data flows one way, no import cycle."""
import ast
import io
import re
import sys
from pathlib import Path

import grimp
import pytest
from django.core.management import call_command
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "agentops", "core", "capabilities", "runs", "notifications", "evaluation", "gateway", "identity",
            "review")

# Every import of our own modules placed inside a function, with its reason (docs/architecture.md).
# Django's AppConfig.ready() is where an app hooks into others once every app's models are loaded.
FUNCTION_LEVEL_IMPORTS = {
    # apps.py signal handlers: after migrate, sync the @capability registry; at worker exit, stop the stdio MCP pool
    ("capabilities/apps.py", "capabilities.kinds.python.sync"),
    ("capabilities/apps.py", "capabilities.kinds.mcp"), ("capabilities/apps.py", "core.projects"),
    ("capabilities/apps.py", "core.models"),
    ("core/apps.py", "core"),  # ready(): connect the token-revoking signal handlers
    ("runs/apps.py", "capabilities"),  # ready(): plug the runs' usage reader into the registry pages
    ("runs/apps.py", "runs"),  # ready(): instrument the frameworks for OpenTelemetry
    ("notifications/apps.py", "notifications"),  # ready(): refresh Slack messages when an approval is decided
    ("notifications/apps.py", "runs.signals"),  # ready(): ... connected to the runs' approval_decided signal
    ("runs/apps.py", "runs.dashboard"),  # ready(): the usage reader the registry pages ask (capability_usage)
    # ready(): each app tells the audit log (core.audit_log) where its objects' pages are
    ("runs/apps.py", "core.audit_log"), ("runs/apps.py", "runs.models"), ("runs/apps.py", "runs.selectors"),
    ("capabilities/apps.py", "core.audit_log"), ("capabilities/apps.py", "capabilities.selectors"),
    ("evaluation/apps.py", "core.audit_log"),
    ("gateway/apps.py", "core.audit_log"), ("gateway/apps.py", "gateway.selectors"),
    # ready(): the runtime's scores when a run finishes (runs.signals.run_finished); the audit log's pages
    ("review/apps.py", "review"), ("review/apps.py", "runs.signals"), ("review/apps.py", "core.audit_log"),
    ("review/apps.py", "runs.selectors"), ("review/apps.py", "review.models"),
    ("review/apps.py", "review.services"), ("review/apps.py", "core.models"),
}


def test_the_import_contracts_hold(capsys):
    """runtime imports no Django, Celery or app code; each layer imports only the layers below it.
    (`lint-imports`, in this process, on this tree's packages.)"""
    sys.path.insert(0, str(ROOT))
    try:
        status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        sys.path.remove(str(ROOT))
    out = capsys.readouterr().out
    assert status == 0, out[-3000:]
    assert "Contracts: 2 kept, 0 broken" in out


def test_no_module_imports_itself_back():
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph(*PACKAGES)
    finally:
        sys.path.remove(str(ROOT))
    cycles = [(m, graph.find_shortest_chain(importer=imported, imported=m))
              for m in sorted(graph.modules) for imported in graph.find_modules_directly_imported_by(m)
              if graph.find_shortest_chain(importer=imported, imported=m)]
    assert cycles == []


def _function_level_imports():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module \
                            and inner.module.split(".")[0] in PACKAGES:
                        yield str(path.relative_to(ROOT)), inner.module
                    elif isinstance(inner, ast.ImportFrom) and inner.level:
                        yield str(path.relative_to(ROOT)), "." * inner.level + (inner.module or "")
                    elif isinstance(inner, ast.Import):
                        yield from ((str(path.relative_to(ROOT)), alias.name) for alias in inner.names
                                    if alias.name.split(".")[0] in PACKAGES)


def test_imports_inside_functions_are_the_listed_ones():
    """An import inside a function to dodge a cycle is a sign the layout is wrong: each one is listed."""
    assert set(_function_level_imports()) <= FUNCTION_LEVEL_IMPORTS


@pytest.mark.django_db
def test_every_model_change_has_its_migration():
    """`manage.py makemigrations --check --dry-run`, in this process: it exits 1 on a missing migration."""
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit as exit:
        pytest.fail(f"makemigrations --check exited {exit.code}:\n{out.getvalue()}")


def test_nothing_outside_the_kinds_table_branches_on_a_capability_kind():
    """A kind is a folder in capabilities/kinds/ and a line in its table (CONTRIBUTING: adding a kind):
    code elsewhere asks the table, never `kind == "http"`."""
    branch = re.compile(r"""kind\s*(?:==|!=|in)\s*\(?\s*(?:Kind\.(?:PYTHON|HTTP|MCP)|["'](?:python|http|mcp)["'])""")
    offenders = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("capabilities/kinds/") or "/migrations/" in relative:
                continue
            offenders += [f"{relative}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                          if branch.search(line)]
    for path in (ROOT / "templates").rglob("*.html"):
        offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                      if re.search(r"""kind\s*==\s*["'](?:python|http|mcp)["']""", line)]
    assert offenders == []


def test_ids_in_paths_use_the_id_converter():
    """`<id:...>` (core.converters) names nothing past 18 digits; Django's `<int:...>` takes any number
    of digits, and an id past the database's integers was a 500 on SQLite."""
    offenders = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*urls.py"):
            offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                          if "<int:" in line]
    assert offenders == []
