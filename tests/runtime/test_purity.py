"""runtime imports only the standard library, jsonschema and itself."""
import ast
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
ALLOWED_THIRD_PARTY = {"jsonschema", "referencing", "regex"}


def imported_roots(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:          # relative: inside runtime
                continue
            yield node.module


def test_runtime_modules_import_only_the_standard_library_jsonschema_and_the_runtime():
    modules = sorted(RUNTIME.rglob("*.py"))   # the simulation too
    assert len(modules) > 10
    offenders = []
    for path in modules:
        for name in imported_roots(path):
            root = name.split(".")[0]
            if root in sys.stdlib_module_names or root in ALLOWED_THIRD_PARTY:
                continue
            if name == "runtime" or name.startswith("runtime."):
                continue
            offenders.append(f"{path.name}: {name}")
    assert offenders == []
