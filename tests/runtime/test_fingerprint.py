"""The outcome fingerprint (design.md "Corners, decided"): ok outputs without their
volatile paths, failures without their bodies."""
from runtime.observation import Observation, OutputRef
from runtime.signatures import outcome_fingerprint, without_paths


def failure_503(body):
    return Observation.failure("server_error", "HTTP 503", output=body, extra={"http_status": 503})


def test_it_ignores_a_failure_body():
    assert outcome_fingerprint(failure_503({"request_id": "a"})) == outcome_fingerprint(failure_503({"request_id": "b"}))


def test_it_ignores_a_failure_message():
    assert (outcome_fingerprint(Observation.failure("timeout", "no answer within 2s"))
            == outcome_fingerprint(Observation.failure("timeout", "no answer within 3s")))


def test_it_tells_http_statuses_apart():
    other = Observation.failure("server_error", "HTTP 502", extra={"http_status": 502})
    assert outcome_fingerprint(failure_503({})) != outcome_fingerprint(other)


def test_it_tells_codes_and_statuses_apart():
    assert outcome_fingerprint(Observation.failure("timeout")) != outcome_fingerprint(Observation.failure("server_error"))
    assert outcome_fingerprint(Observation.failure("timeout")) != outcome_fingerprint(Observation.success(None))


def test_an_ok_output_keeps_its_whole_content_by_default():
    assert (outcome_fingerprint(Observation.success({"documents": [], "request_id": "a"}))
            != outcome_fingerprint(Observation.success({"documents": [], "request_id": "b"})))


def test_volatile_paths_are_left_out_of_an_ok_output():
    paths = ("request_id", "meta.generated_at")
    a = Observation.success({"documents": [], "request_id": "a", "meta": {"generated_at": "10:00", "index": "v1"}})
    b = Observation.success({"documents": [], "request_id": "b", "meta": {"generated_at": "10:01", "index": "v1"}})
    c = Observation.success({"documents": [], "request_id": "b", "meta": {"generated_at": "10:01", "index": "v2"}})
    assert outcome_fingerprint(a, paths) == outcome_fingerprint(b, paths)
    assert outcome_fingerprint(a, paths) != outcome_fingerprint(c, paths)


def test_the_state_changed_flag_is_not_part_of_the_fingerprint():
    assert (outcome_fingerprint(Observation.success({"x": 1}, state_changed=True))
            == outcome_fingerprint(Observation.success({"x": 1})))


def test_a_large_output_is_identified_by_its_stored_hash():
    ref = OutputRef(uri="db://1", size_bytes=10, sha256="abc")
    assert outcome_fingerprint(Observation.success(None, output_ref=ref)) == "ok:abc"


def test_without_paths_handles_wildcards_indexes_and_missing_paths():
    value = {"items": [{"etag": 1, "id": "a"}, {"etag": 2, "id": "b"}], "n": 2}
    assert without_paths(value, ["items.*.etag"]) == {"items": [{"id": "a"}, {"id": "b"}], "n": 2}
    assert without_paths(value, ["items.1.etag"]) == {"items": [{"etag": 1, "id": "a"}, {"id": "b"}], "n": 2}
    assert without_paths(value, ["missing.path", "n.deeper", "items.9.etag"]) == value
    assert value["items"][0] == {"etag": 1, "id": "a"}, "the original is not modified"
    # A list element itself is never removed: it would shift the rest.
    assert without_paths([1, 2], ["0"]) == [1, 2]
