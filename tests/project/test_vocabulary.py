"""The runtime owns the stop-reason vocabulary: no product code spells a stop reason, a stop kind
or a stall kind as a string literal (issue 27: "grep finds stop-reason strings only in the
runtime's vocabulary module, migrations and tests").

Product code compares with the enums (`StopKind.COMPLETED`), builds reasons and prefixes with
`StopReason` (`str(StopReason(StopKind.BUDGET_EXHAUSTED, BudgetName.COST))`,
`StopReason.prefix(kind)`), reads a stall kind with `StallKind`, and words them in dicts keyed by
the enums; templates name a code through the `stop_code` filter.
"""
import ast
import re
from pathlib import Path

from runtime.stop import StallKind, StopKind, StopReason

ROOT = Path(__file__).resolve().parents[2]
# Everything that is product code but the runtime itself (bench scripts and tools included).
PRODUCT = ("agentops", "core", "capabilities", "runs", "notifications", "evaluation", "gateway", "identity", "review", "bench",
           "tools")
VOCABULARY = ({str(r) for r in StopReason.every()} | {k.value for k in StopKind} | {k.value for k in StallKind})
# A code with an underscore is never an English word: flagged inside a sentence too.
_CODES = "|".join(sorted((v for v in VOCABULARY if "_" in v), key=len, reverse=True))
CODE_IN_TEXT = re.compile(rf"\b(?:{_CODES})\b")
# Names that happen to be spelled like a vocabulary value, where they name something else.
NAMES = {
    "repeated_without_progress": ("the Attempt field of that name", {
        "runs/api/runs.py", "runs/selectors.py", "runs/trace/as_json.py", "runs/trace/review.py",
        "runs/trace/timeline.py", "runs/trace/compare_page.py", "runs/otel.py", "bench/pages.py"}),
    "stalled": ("a figure counting stalled runs", {
        "runs/dashboard/periods.py", "notifications/rules.py", "evaluation/runner.py"}),
    "internal_error": ("a figure counting runs stopped by internal errors", {"bench/chaos.py"}),
}


def _product_files(suffixes):
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in suffixes and "/migrations/" not in path.as_posix():
                yield path, path.relative_to(ROOT).as_posix()


def _flagged(value: str) -> bool:
    return value in VOCABULARY or value.removesuffix(":") in VOCABULARY or bool(CODE_IN_TEXT.search(value))


def _exempt_nodes(tree: ast.AST) -> set[int]:
    """Docstrings, and the members of an enum or choices class (another closed set may share a word)."""
    exempt = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            exempt.add(id(body[0].value))
        if isinstance(node, ast.ClassDef) and any(
                (b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")).endswith(("Enum", "Choices"))
                for b in node.bases):
            for statement in node.body:
                if isinstance(statement, ast.Assign):
                    exempt |= {id(n) for n in ast.walk(statement.value)}
    return exempt


def _python_offenders(path: Path, relative: str) -> list[str]:
    tree = ast.parse(path.read_text())
    exempt = _exempt_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exempt \
                and _flagged(node.value):
            words = CODE_IN_TEXT.findall(node.value) or [node.value.removesuffix(":")]
            if not all(relative in NAMES.get(w, ((), ()))[1] for w in words):
                found.append(f"{relative}:{node.lineno}: {node.value[:80]!r}")
    return found


def test_no_product_code_spells_a_stop_reason():
    offenders = []
    for path, relative in _product_files({".py"}):
        offenders += _python_offenders(path, relative)
    assert offenders == [], "use the runtime's enums (runtime/stop.py) instead of these literals"


def test_no_template_spells_a_stop_reason():
    quoted = re.compile(r"""(["'])([a-z_:]+)\1""")
    offenders = []
    for path in sorted((ROOT / "templates").rglob("*")):
        if path.suffix not in (".html", ".txt"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if CODE_IN_TEXT.search(line) or any(_flagged(m.group(2)) for m in quoted.finditer(line)):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert offenders == [], "name a stop reason with the stop_code filter or the enums in the view"


def test_it_would_catch_a_literal(tmp_path):
    """The check itself: a comparison, a prefix built by hand and a code in a sentence are caught;
    an enum's own member and a docstring are not."""
    module = tmp_path / "m.py"
    module.write_text('"""Says budget_exhausted in a docstring."""\n'
                      "from enum import StrEnum\n"
                      "class Other(StrEnum):\n    COMPLETED = 'completed'\n"
                      "a = run.stop_reason == 'completed'\n"
                      "b = kind + ':' if kind == 'budget_exhausted:' else ''\n"
                      "c = 'the run stops (approval_rejected)'\n"
                      "d = {'planner_exhausted': 'words'}\n")
    lines = [o.split(":")[1] for o in _python_offenders(module, "m.py")]
    assert sorted(lines) == ["5", "6", "7", "8"]
