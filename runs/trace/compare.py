"""Two runs side by side: their steps aligned, each aligned pair's arguments and outcome as a diff.

Pure Python (no Django, no query): runs.trace.compare_page reads the rows and builds the page from
these, so the alignment and the diffs are tested without a database.

- Steps are aligned by what they are and in the order they ran: a step's identity is its id within
  its plan, its capability and how many steps of the run with that id and capability came before it
  (a replanned `s1` that searches again is the run's second `s1 search_documents`). The pairs kept
  are the longest run of identities both runs share in the same order (a longest increasing
  subsequence: O(n log n), so two runs of 5,000 steps align in milliseconds, whatever their shape);
  every other step is shown alone, on its side, where it ran.
- Values (arguments, outputs) are compared as canonical pretty JSON (sorted keys, two-space
  indent) with difflib. Both are read under a cap (`CappedText`): a value cut off at the cap is
  pretty-printed from its prefix without parsing it whole, the diff says so, and a diff longer
  than `MAX_DIFF_LINES` is cut with a note.
"""
from __future__ import annotations

import difflib
import json
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from runs.trace.labels import attempt_label, kind_label

MAX_DIFF_LINES = 200
DIFF_CONTEXT = 3


# -- the rows ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptCell:
    """One attempt, as a column of the comparison shows it."""

    uid: str
    revision: int | None
    step_key: str
    number: int
    kind: str
    status: str
    error_code: str
    latency_s: float
    side_effect: str
    repeated: bool

    @property
    def label(self) -> str:
        return attempt_label(self.revision, self.step_key, self.number)

    @property
    def kind_label(self) -> str:
        return kind_label(self.kind)


@dataclass(frozen=True)
class StepSide:
    """One step of one run: where it ran, what it called, how it ended, its attempts (the first few)."""

    id: int
    revision: int
    index: int
    key: str
    capability: str
    status: str
    arguments_hash: str
    attempt_count: int
    attempts: tuple[AttemptCell, ...] = ()   # the first ones, in order (runs.trace.compare_page caps them)
    last: AttemptCell | None = None          # the step's outcome: its last attempt

    @property
    def label(self) -> str:
        return f"r{self.revision}·{self.key}"


@dataclass(frozen=True)
class Aligned:
    """A row of the comparison: a step of each run (matched), or of one run only."""

    position: int        # 1-based, in the comparison's order
    a: StepSide | None
    b: StepSide | None

    @property
    def match(self) -> str:
        return "matched" if self.a and self.b else "only_a" if self.a else "only_b"

    @property
    def differs(self) -> bool:
        """What the rows alone tell: unmatched, other arguments, another outcome or number of attempts.
        (Outputs are compared where the page reads them: `value_diff`.)"""
        if self.a is None or self.b is None:
            return True
        a, b = self.a, self.b
        return (a.arguments_hash != b.arguments_hash or a.status != b.status or a.attempt_count != b.attempt_count
                or _outcome(a.last) != _outcome(b.last))

    def attempt_pairs(self) -> list[tuple[AttemptCell | None, AttemptCell | None]]:
        """The attempts shown, side by side by number (#1 beside #1)."""
        left = self.a.attempts if self.a else ()
        right = self.b.attempts if self.b else ()
        return [(left[i] if i < len(left) else None, right[i] if i < len(right) else None)
                for i in range(max(len(left), len(right)))]


def _outcome(cell: AttemptCell | None) -> tuple[str, str] | None:
    return None if cell is None else (cell.status, cell.error_code)


# -- the alignment ----------------------------------------------------------------------------


def identities(steps: Sequence[StepSide]) -> list[tuple[str, str, int]]:
    """(id, capability, how many before it had both): unique within a run, and the same for the same
    work in another run."""
    seen: dict[tuple[str, str], int] = {}
    found = []
    for step in steps:
        key = (step.key, step.capability)
        found.append((step.key, step.capability, seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    return found


def align(a: Sequence[StepSide], b: Sequence[StepSide]) -> list[Aligned]:
    """Both runs' steps (each in the order it ran) as one list of rows: the matched pairs in order,
    and between them what only one run did (the first run's steps before the second's)."""
    where_in_b = {identity: j for j, identity in enumerate(identities(b))}
    candidates = [(i, where_in_b[identity]) for i, identity in enumerate(identities(a)) if identity in where_in_b]
    rows: list[Aligned] = []
    next_a = next_b = 0

    def add(left: StepSide | None, right: StepSide | None) -> None:
        rows.append(Aligned(position=len(rows) + 1, a=left, b=right))

    for i, j in _longest_increasing(candidates):
        for x in range(next_a, i):
            add(a[x], None)
        for y in range(next_b, j):
            add(None, b[y])
        add(a[i], b[j])
        next_a, next_b = i + 1, j + 1
    for x in range(next_a, len(a)):
        add(a[x], None)
    for y in range(next_b, len(b)):
        add(None, b[y])
    return rows


def _longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of (i, j) pairs (i increasing) whose j increase too: patience sorting."""
    tails: list[int] = []          # tails[k]: the smallest j ending a chain of length k + 1
    tail_at: list[int] = []        # ... and the index in pairs of that chain's last pair
    previous = [-1] * len(pairs)
    for n, (_, j) in enumerate(pairs):
        k = bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_at.append(n)
        else:
            tails[k], tail_at[k] = j, n
        previous[n] = tail_at[k - 1] if k else -1
    chain = []
    n = tail_at[-1] if tail_at else -1
    while n >= 0:
        chain.append(pairs[n])
        n = previous[n]
    return chain[::-1]


@dataclass(frozen=True)
class AlignmentCounts:
    rows: int
    matched: int
    only_a: int
    only_b: int
    differing: int


def counts(rows: Sequence[Aligned]) -> AlignmentCounts:
    matched = sum(1 for r in rows if r.a and r.b)
    only_a = sum(1 for r in rows if r.a and not r.b)
    return AlignmentCounts(rows=len(rows), matched=matched, only_a=only_a, only_b=len(rows) - matched - only_a,
                           differing=sum(1 for r in rows if r.differs))


# -- values and their diffs -------------------------------------------------------------------


@dataclass(frozen=True)
class CappedText:
    """A value's JSON text as read under a cap: `text` holds at most the cap, `size` the whole length."""

    text: str
    size: int
    truncated: bool = False
    sha256: str = ""     # when the value is a stored output: equal hashes are equal values, unread


@dataclass(frozen=True)
class DiffLine:
    kind: str    # added | removed | context | hunk
    text: str


@dataclass(frozen=True)
class ValueDiff:
    """Two values compared: `same` is None when only their first part could be compared, and was alike."""

    same: bool | None
    lines: tuple[DiffLine, ...] = ()
    notes: tuple[str, ...] = ()


def pretty_lines(value: CappedText) -> list[str]:
    """Canonical pretty JSON, a line a member; from the prefix alone when the value was cut off."""
    if not value.truncated:
        try:
            parsed = json.loads(value.text)
        except ValueError:
            return value.text.splitlines()
        return json.dumps(parsed, indent=2, sort_keys=True, ensure_ascii=False, default=str).splitlines()
    return pretty_json_prefix(value.text)


def pretty_json_prefix(text: str, indent: int = 2) -> list[str]:
    """JSON text that may stop anywhere, laid out as json.dumps(indent=2) lays it out (key order as
    given), without parsing it: a large output's first part reads like the rest would."""
    lines: list[str] = []
    line: list[str] = []
    depth = 0
    in_string = escaped = False

    def flush() -> None:
        if "".join(line).strip():
            lines.append("".join(line).rstrip())
        line.clear()
        line.append(" " * indent * depth)

    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        i += 1
        if in_string:
            line.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            line.append(ch)
        elif ch in "{[":
            rest = text[i:i + 64].lstrip()
            if rest[:1] == ("}" if ch == "{" else "]"):   # an empty object or array stays on its line
                line.append(ch + rest[0])
                i = text.index(rest[0], i) + 1
                continue
            line.append(ch)
            depth += 1
            flush()
        elif ch in "}]":
            depth = max(0, depth - 1)
            flush()
            line.append(ch)
        elif ch == ",":
            line.append(ch)
            flush()
        elif ch == ":":
            line.append(": ")
        elif ch not in " \t\r\n":
            line.append(ch)
    flush()
    return lines


def _size_text(size: int) -> str:
    if size < 10_000:
        return f"{size:,} characters"
    if size < 1_000_000:
        return f"{size / 1000:.0f} kB"
    return f"{size / 1_000_000:.1f} MB"


def value_diff(a: CappedText | None, b: CappedText | None, *, what: str = "value",
               max_lines: int = MAX_DIFF_LINES) -> ValueDiff:
    """A's value against B's as a unified diff of their canonical pretty JSON (a missing side is empty)."""
    if a is not None and b is not None and a.sha256 and a.sha256 == b.sha256:
        return ValueDiff(same=True, notes=(f"The same stored {what} (sha256 {a.sha256[:12]}…).",))
    notes = [f"{side}'s {what} is {_size_text(v.size)}: only its first {_size_text(len(v.text))} are compared."
             for side, v in (("A", a), ("B", b)) if v is not None and v.truncated]
    left = pretty_lines(a) if a is not None else []
    right = pretty_lines(b) if b is not None else []
    if left == right:
        cut = bool(notes)
        if cut:
            notes.append("The parts compared are the same; the rest was not compared.")
        return ValueDiff(same=None if cut else True, notes=tuple(notes))
    found = [line for line in difflib.unified_diff(left, right, lineterm="", n=DIFF_CONTEXT)
             if not line.startswith(("---", "+++"))]
    kinds = {"+": "added", "-": "removed", "@": "hunk"}
    lines = tuple(DiffLine(kinds.get(line[:1], "context"), line[1:] if line[:1] in "+- " else line)
                  for line in found[:max_lines])
    if len(found) > max_lines:
        notes.append(f"{len(found) - max_lines:,} more diff lines are not shown.")
    return ValueDiff(same=False, lines=lines, notes=tuple(notes))


# -- usage and stop, side by side ---------------------------------------------------------------


USAGE = (("tool_calls", "Tool calls"), ("attempts", "Attempts"), ("steps", "Steps"), ("plans", "Plans received"),
         ("iterations", "Iterations"), ("retries", "Retries"), ("tokens", "Tokens"), ("cost", "Cost"),
         ("wall_s", "Wall time (s)"), ("side_effects_committed", "Side effects committed"),
         ("approvals_requested", "Approvals requested"), ("repeated_attempts", "Repeated without progress"))


@dataclass(frozen=True)
class UsageRow:
    name: str
    label: str
    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        """B minus A (positive: B spent more)."""
        return None if self.a is None or self.b is None else self.b - self.a


def usage_rows(a: dict[str, float | None], b: dict[str, float | None]) -> list[UsageRow]:
    return [UsageRow(name, label, a.get(name), b.get(name)) for name, label in USAGE]
