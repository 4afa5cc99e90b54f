from runtime.observation import Observation, OutputRef
from runtime.signatures import (
    action_signature,
    arguments_hash,
    canonical_json,
    idempotency_key,
    outcome_fingerprint,
    signature_text,
)


def test_canonical_json_ignores_key_order_and_whitespace():
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'


def test_the_action_signature_is_capability_and_canonical_arguments():
    assert action_signature("search", {"q": "x", "n": 1}) == ("search", '{"n":1,"q":"x"}')
    assert signature_text(action_signature("search", {"n": 1, "q": "x"})) == 'search {"n":1,"q":"x"}'


def test_the_fingerprint_covers_status_code_and_output():
    ok = Observation.success({"documents": []})
    assert outcome_fingerprint(ok) == outcome_fingerprint(Observation.success({"documents": []}, state_changed=True))
    assert outcome_fingerprint(ok) != outcome_fingerprint(Observation.success({"documents": [1]}))
    assert outcome_fingerprint(Observation.failure("timeout")) != outcome_fingerprint(Observation.failure("server_error"))


def test_a_large_output_is_fingerprinted_by_its_reference_hash():
    a = Observation.success(None, output_ref=OutputRef(uri="s3://x", size_bytes=10, sha256="abc"))
    b = Observation.success(None, output_ref=OutputRef(uri="s3://y", size_bytes=10, sha256="abd"))
    assert outcome_fingerprint(a) != outcome_fingerprint(b)


def test_the_idempotency_key_follows_the_action_across_steps():
    sig = action_signature("create_ticket", {"title": "x"})
    key = idempotency_key("run-1", sig)
    assert key == idempotency_key("run-1", action_signature("create_ticket", {"title": "x"}))
    assert key != idempotency_key("run-2", sig)
    assert key != idempotency_key("run-1", action_signature("create_ticket", {"title": "y"}))
    assert key != idempotency_key("run-1", action_signature("close_ticket", {"title": "x"}))


def test_distinct_calls_put_the_step_id_in_the_key():
    sig = action_signature("append_line", {"text": "x"})
    assert idempotency_key("run-1", sig, "s1") == idempotency_key("run-1", sig, "s1")
    assert idempotency_key("run-1", sig, "s1") != idempotency_key("run-1", sig, "s2")
    assert idempotency_key("run-1", sig, "s1") != idempotency_key("run-1", sig)


def test_the_arguments_hash_ignores_key_order():
    assert arguments_hash({"a": 1, "b": 2}) == arguments_hash({"b": 2, "a": 1})
