"""Comparing two runs, the pure part (runs.trace.compare): the alignment of steps and the value diffs."""
import difflib
import json
import time

from runs.trace.compare import (
    AttemptCell,
    CappedText,
    StepSide,
    align,
    counts,
    pretty_json_prefix,
    usage_rows,
    value_diff,
)


def _step(pk, key, capability, *, revision=1, index=0, status="succeeded", args="h", attempts=1, outcome="ok"):
    cells = tuple(AttemptCell(uid=f"{pk}-{n}", revision=revision, step_key=key, number=n, kind="call" if n == 1
                              else "retry", status=outcome if n == attempts else "retryable",
                              error_code="" if outcome == "ok" and n == attempts else "timeout", latency_s=0.1,
                              side_effect="not_committed", repeated=False) for n in range(1, attempts + 1))
    last = cells[-1] if cells else None
    return StepSide(id=pk, revision=revision, index=index, key=key, capability=capability, status=status,
                    arguments_hash=args, attempt_count=attempts, attempts=cells, last=last,
                    outcome=(last.status, last.error_code) if last else None)


def _shape(rows):
    return [(r.a.id if r.a else None, r.b.id if r.b else None) for r in rows]


class TestAlign:
    def test_it_matches_the_same_steps_in_order(self):
        a = [_step(1, "s1", "search"), _step(2, "s2", "get")]
        b = [_step(11, "s1", "search"), _step(12, "s2", "get")]
        rows = align(a, b)
        assert _shape(rows) == [(1, 11), (2, 12)]
        assert [r.position for r in rows] == [1, 2]
        assert not any(r.differs for r in rows)

    def test_it_shows_a_step_only_one_run_made_on_its_side_where_it_ran(self):
        a = [_step(1, "s1", "search"), _step(2, "s2", "get")]
        b = [_step(11, "s1", "search"), _step(12, "s1", "search", revision=2), _step(13, "s2", "get", revision=2)]
        rows = align(a, b)
        assert _shape(rows) == [(1, 11), (None, 12), (2, 13)]
        assert [r.match for r in rows] == ["matched", "only_b", "matched"]
        assert counts(rows).only_b == 1 and counts(rows).matched == 2 and counts(rows).differing == 1

    def test_a_step_with_the_same_id_but_another_capability_is_not_the_same_step(self):
        rows = align([_step(1, "s1", "search")], [_step(11, "s1", "create_ticket")])
        assert _shape(rows) == [(1, None), (None, 11)]
        assert [r.match for r in rows] == ["only_a", "only_b"]

    def test_repeated_ids_are_matched_by_occurrence(self):
        """A gateway session: every call is its own one-step plan, all named s1."""
        a = [_step(n, "s1", cap, revision=n) for n, cap in enumerate(["x", "y", "x", "y"], start=1)]
        b = [_step(10 + n, "s1", cap, revision=n) for n, cap in enumerate(["x", "x", "y"], start=1)]
        rows = align(a, b)
        # x#1, x#2, y#1 of b against x#1, y#1, x#2, y#2 of a: two of them keep one order in both.
        assert [r.match for r in rows].count("matched") == 2
        assert len(rows) == 5 and counts(rows).only_a == 2 and counts(rows).only_b == 1

    def test_crossed_orders_keep_the_longest_common_order(self):
        a = [_step(1, "s1", "a"), _step(2, "s2", "b"), _step(3, "s3", "c")]
        b = [_step(13, "s3", "c"), _step(11, "s1", "a"), _step(12, "s2", "b")]
        rows = align(a, b)
        assert [(x, y) for x, y in _shape(rows) if x and y] == [(1, 11), (2, 12)]
        assert (3, None) in _shape(rows) and (None, 13) in _shape(rows)

    def test_either_side_may_be_empty(self):
        assert align([], []) == []
        assert _shape(align([_step(1, "s1", "a")], [])) == [(1, None)]
        assert _shape(align([], [_step(1, "s1", "a")])) == [(None, 1)]

    def test_a_matched_step_differs_by_arguments_attempts_or_outcome(self):
        assert align([_step(1, "s1", "a", args="x")], [_step(2, "s1", "a", args="y")])[0].differs
        assert align([_step(1, "s1", "a", attempts=1)], [_step(2, "s1", "a", attempts=3)])[0].differs
        assert align([_step(1, "s1", "a")], [_step(2, "s1", "a", outcome="terminal")])[0].differs

    def test_attempts_pair_by_number(self):
        row = align([_step(1, "s1", "a", attempts=1)], [_step(2, "s1", "a", attempts=3)])[0]
        pairs = row.attempt_pairs()
        assert [(x.number if x else None, y.number if y else None) for x, y in pairs] == [(1, 1), (None, 2), (None, 3)]
        assert pairs[0][0].label == "r1·s1#1" and pairs[1][1].kind_label == "retry"

    def test_two_runs_of_5000_steps_align_quickly_whatever_their_order(self):
        a = [_step(n, "s1", f"cap{n % 7}", revision=n) for n in range(5000)]
        b = list(reversed([_step(10_000 + n, "s1", f"cap{n % 7}", revision=n) for n in range(5000)]))
        started = time.perf_counter()
        rows = align(a, b)
        elapsed = time.perf_counter() - started
        assert len(rows) >= 5000 and counts(rows).rows == len(rows)
        assert elapsed < 5  # generous: the point is it is not quadratic (no timing figure asserted)


class TestValueDiff:
    def test_equal_values_are_the_same_whatever_their_key_order_or_spacing(self):
        a = CappedText('{"b": 1, "a": [1, 2]}', 21)
        b = CappedText('{"a":[1,2],"b":1}', 17)
        assert value_diff(a, b).same is True
        assert value_diff(a, b).lines == ()

    def test_a_change_is_a_line_removed_and_a_line_added_of_canonical_pretty_json(self):
        a = CappedText(json.dumps({"ticket": {"id": 7, "status": "open"}}), 0)
        b = CappedText(json.dumps({"ticket": {"id": 7, "status": "closed"}}), 0)
        diff = value_diff(a, b)
        assert diff.same is False
        assert ("removed", '    "status": "open"') in [(d.kind, d.text) for d in diff.lines]
        assert ("added", '    "status": "closed"') in [(d.kind, d.text) for d in diff.lines]
        assert diff.lines[0].kind == "hunk"

    def test_hunks_say_where_they_are_in_each_value(self):
        a = CappedText(json.dumps({"k": list(range(50)), "z": 1}), 0)
        b = CappedText(json.dumps({"k": list(range(50)), "z": 2}), 0)
        lines = value_diff(a, b).lines
        left = json.dumps({"k": list(range(50)), "z": 1}, indent=2).splitlines()
        right = json.dumps({"k": list(range(50)), "z": 2}, indent=2).splitlines()
        expected = [line for line in difflib.unified_diff(left, right, lineterm="") if line.startswith("@@")]
        assert [d.text for d in lines if d.kind == "hunk"] == expected == ["@@ -51,5 +51,5 @@"]
        assert [(d.kind, d.text) for d in lines if d.kind in ("added", "removed")] == [
            ("removed", '  "z": 1'), ("added", '  "z": 2')]

    def test_a_value_longer_than_the_diff_can_read_is_compared_in_part_and_says_so(self):
        a = CappedText(json.dumps([{"n": n, "side": 0} for n in range(2000)]), 0)
        b = CappedText(json.dumps([{"n": n, "side": 1} for n in range(2000)]), 0)
        diff = value_diff(a, b)
        assert diff.same is False and any("the rest was not compared" in note for note in diff.notes)

    def test_a_missing_side_is_all_added(self):
        diff = value_diff(None, CappedText('{"q": "x"}', 10))
        assert diff.same is False and {d.kind for d in diff.lines} <= {"added", "hunk"}

    def test_long_diffs_are_cut_with_a_note(self):
        a = CappedText(json.dumps(list(range(1000))), 0)
        b = CappedText(json.dumps(list(range(5000, 6000))), 0)
        diff = value_diff(a, b, max_lines=50)
        assert len(diff.lines) == 50 and "more diff lines are not shown" in diff.notes[-1]

    def test_a_value_cut_at_the_cap_is_compared_on_its_first_part_and_says_so(self):
        whole = json.dumps({"items": [{"n": n, "text": "x" * 20} for n in range(2000)]}, separators=(",", ":"))
        a = CappedText(whole[:4000], len(whole), truncated=True)
        b = CappedText(whole[:4000], len(whole), truncated=True)
        diff = value_diff(a, b, what="outcome")
        assert diff.same is None
        assert any("only its first" in note for note in diff.notes)
        changed = CappedText(whole[:4000].replace('"n":5,', '"n":55,'), len(whole), truncated=True)
        lines = [(d.kind, d.text.strip()) for d in value_diff(a, changed).lines]
        assert ("removed", '"n": 5,') in lines and ("added", '"n": 55,') in lines

    def test_stored_outputs_with_the_same_hash_are_the_same_unread(self):
        a = CappedText("", 10**7, truncated=True, sha256="ab" * 32)
        assert value_diff(a, a).same is True

    def test_the_prefix_printer_lays_out_json_as_json_dumps_does(self):
        value = {"a": [1, {"b": "x,y:{z}"}], "c": {}, "d": [], "e": "q\"uote"}
        text = json.dumps(value, separators=(",", ":"))
        assert pretty_json_prefix(text) == json.dumps(value, indent=2).splitlines()
        assert pretty_json_prefix(text[:12])  # stops anywhere without failing


def test_usage_rows_put_b_minus_a_beside_both():
    rows = {r.name: r for r in usage_rows({"tokens": 100, "cost": 0.5}, {"tokens": 250, "cost": None})}
    assert rows["tokens"].delta == 150 and rows["cost"].delta is None
    assert rows["tool_calls"].a is None
