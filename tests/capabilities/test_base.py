"""What every executor shares: output store, trace headers, the refusal checks, dispatch."""
from __future__ import annotations

import pytest

from capabilities.executors.base import FileOutputStore, storable_json, traceparent
from capabilities.executors.dispatch import CapabilityExecutor
from runtime.capability import CapabilitySpec, Kind
from runtime.observation import ErrorCode, Observation


def test_the_file_store_is_content_addressed(tmp_path):
    store = FileOutputStore(tmp_path)
    content = storable_json({"b": 1, "a": [1, 2]})
    assert content == b'{"a":[1,2],"b":1}'
    uri = store.save(content, "a" * 64)
    assert uri == "output:" + "a" * 64
    assert store.save(content, "a" * 64) == uri
    assert store.read(uri) == {"a": [1, 2], "b": 1}


@pytest.mark.parametrize("uri", ["output:../../etc/passwd", "file:///etc/passwd", "output:" + "b" * 64])
def test_the_file_store_reads_only_its_own_hashes(tmp_path, uri):
    with pytest.raises(LookupError):
        FileOutputStore(tmp_path).read(uri)


def test_traceparent_keeps_w3c_ids_and_hashes_others_into_shape():
    assert traceparent("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331") == \
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    version, trace, span, flags = traceparent("run-42", "step-3").split("-")
    assert (len(trace), len(span)) == (32, 16)


class Recorder:
    def __init__(self):
        self.calls = []

    def execute(self, spec, arguments, **kw):
        self.calls.append((spec.name, arguments, kw))
        return Observation.success({"ran": spec.name})

    def lookup_status(self, spec, arguments, **kw):
        return None


def test_dispatch_picks_the_executor_for_the_kind():
    python, http = Recorder(), Recorder()
    executor = CapabilityExecutor(others={"python": python, "http": http, "mcp": Recorder()})
    executor.execute(CapabilitySpec(name="p", kind=Kind.PYTHON), {}, idempotency_key="k", timeout_s=1,
                     trace_id="t", span_id="s")
    executor.execute(CapabilitySpec(name="h", kind=Kind.HTTP), {"a": 1}, idempotency_key=None, timeout_s=2,
                     trace_id="t", span_id="s")
    assert [c[0] for c in python.calls] == ["p"]
    assert http.calls[0][2]["timeout_s"] == 2


def test_dispatch_refuses_a_kind_without_an_executor():
    observation = CapabilityExecutor().execute(CapabilitySpec(name="sim", kind=Kind.SIMULATED), {},
                                               idempotency_key=None, timeout_s=1, trace_id="t", span_id="s")
    assert observation.error_code == ErrorCode.INVALID_ARGUMENTS
    assert "simulated" in observation.error_message


def test_dispatch_accepts_more_kinds():
    simulated = Recorder()
    executor = CapabilityExecutor(others={"simulated": simulated})
    observation = executor.execute(CapabilitySpec(name="sim", kind=Kind.SIMULATED), {}, idempotency_key=None,
                                   timeout_s=1, trace_id="t", span_id="s")
    assert observation.output == {"ran": "sim"}
