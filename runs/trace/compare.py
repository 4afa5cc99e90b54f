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
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from runs.trace.labels import attempt_label, kind_label

MAX_DIFF_LINES = 200
MAX_DIFF_INPUT_LINES = 600
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
    outcome: tuple[str, str] | None = None   # its last attempt's (status, error code); None before any
    attempts: tuple[AttemptCell, ...] = ()   # the first ones, in order (read for the page's rows only)
    last: AttemptCell | None = None          # the step's outcome: its last attempt (likewise)

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
                or a.outcome != b.outcome)

    def attempt_pairs(self) -> list[tuple[AttemptCell | None, AttemptCell | None]]:
        """The attempts shown, side by side by number (#1 beside #1)."""
        left = self.a.attempts if self.a else ()
        right = self.b.attempts if self.b else ()
        return [(left[i] if i < len(left) else None, right[i] if i < len(right) else None)
                for i in range(max(len(left), len(right)))]


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


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\],:]|[^"{}\[\],:\s]+|\s+')


def pretty_json_prefix(text: str, indent: int = 2) -> list[str]:
    """JSON text that may stop anywhere, laid out as json.dumps(indent=2) lays it out (key order as
    given), without parsing it: a large output's first part reads like the rest would."""
    lines: list[str] = []
    line = ""
    depth = 0
    tokens = [t for t in _TOKENS.findall(text) if not t.isspace()]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token in ("{", "["):
            if i < len(tokens) and tokens[i] == ("}" if token == "{" else "]"):   # {} and [] stay on their line
                line += token + tokens[i]
                i += 1
                continue
            lines.append(line + token)
            depth += 1
            line = " " * indent * depth
        elif token in ("}", "]"):
            if line.strip():
                lines.append(line)
            depth = max(0, depth - 1)
            line = " " * indent * depth + token
        elif token == ",":
            lines.append(line + token)
            line = " " * indent * depth
        elif token == ":":
            line += ": "
        else:
            line += token
    if line.strip():
        lines.append(line)
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
    found = _unified(left, right, notes)
    lines = tuple(found[:max_lines])
    if len(found) > max_lines:
        notes.append(f"{len(found) - max_lines:,} more diff lines are not shown.")
    return ValueDiff(same=False, lines=lines, notes=tuple(notes))


def _unified(left: list[str], right: list[str], notes: list[str]) -> list[DiffLine]:
    """difflib's unified diff of the two line lists, with true line numbers in its hunk headers, over
    what lies between their common first and last lines, at most MAX_DIFF_INPUT_LINES of it a side:
    difflib's matching grows faster than the lines, and a page shows MAX_DIFF_LINES anyway."""
    head = 0
    while head < min(len(left), len(right)) and left[head] == right[head]:
        head += 1
    tail = 0
    while tail < min(len(left), len(right)) - head and left[-1 - tail] == right[-1 - tail]:
        tail += 1
    start, tail = max(0, head - DIFF_CONTEXT), max(0, tail - DIFF_CONTEXT)   # keep the context either side
    a_mid, b_mid = left[start:len(left) - tail], right[start:len(right) - tail]
    if max(len(a_mid), len(b_mid)) > MAX_DIFF_INPUT_LINES:
        notes.append(f"Compared from line {start + 1:,} for {MAX_DIFF_INPUT_LINES:,} lines; the rest was not "
                     f"compared.")
        a_mid, b_mid = a_mid[:MAX_DIFF_INPUT_LINES], b_mid[:MAX_DIFF_INPUT_LINES]
    found: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(None, a_mid, b_mid)
    for group in matcher.get_grouped_opcodes(DIFF_CONTEXT):
        a1, a2, b1, b2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        found.append(DiffLine("hunk", f"@@ -{_range(start + a1, a2 - a1)} +{_range(start + b1, b2 - b1)} @@"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                found += [DiffLine("context", line) for line in a_mid[i1:i2]]
                continue
            found += [DiffLine("removed", line) for line in a_mid[i1:i2]]
            found += [DiffLine("added", line) for line in b_mid[j1:j2]]
    return found


def _range(start: int, length: int) -> str:
    """A hunk's range as unified diffs write it (1-based; an empty range names the line before it)."""
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


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
