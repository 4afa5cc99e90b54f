"""The SSRF corpus against every way out of the server: HTTP capabilities, MCP over HTTP, the LLM planner, $refs.

The guard is configured as permissively as an administrator could (allow_private on, every host name of
the corpus listed, or every network listed): cloud credential ranges, in every spelling, must still be
refused, and nothing may reach them. The attacker controls DNS: every name resolves to the metadata address.
"""
from __future__ import annotations

import pytest

from capabilities.executors.base import FileOutputStore
from capabilities.kinds.http.executor import HttpExecutor
from capabilities.kinds.mcp.executor import McpExecutor
from capabilities.netguard import NetGuard, URLRefused
from runs.planners.llm import LLMConfig, LLMPlanner
from runtime import schemas
from runtime.capability import CapabilitySpec, Kind
from runtime.observation import ErrorCode
from runtime.planning import PlanningRequest

CORPUS = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://169.254.170.2/v2/credentials/abc",             # ECS task credentials
    "http://169.254.170.23/v1/credentials",                # EKS pod identity
    "http://169.254.0.1/", "http://169.254.255.254/",
    "http://[fd00:ec2::254]/latest/meta-data/", "http://[fd00:ec2::23]/",
    "http://192.0.0.192/opc/v2/instance/",                  # Oracle Cloud
    "http://100.100.100.200/latest/meta-data/",             # Alibaba
    "http://168.63.129.16/machine?comp=goalstate",          # Azure wire server
    "http://[::ffff:169.254.169.254]/", "http://[::ffff:a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::]/",                           # 6to4
    "http://[2002:a9fe:aa02::1]/",                          # 6to4 of 169.254.170.2
    "http://[64:ff9b::a9fe:a9fe]/", "http://[64:ff9b::169.254.169.254]/",   # NAT64
    "http://[64:ff9b:1::a9fe:a9fe]/",                       # local-use NAT64
    "http://[::a9fe:a9fe]/",                                # IPv4-compatible
    "http://[2001:0:4136:e378:8000:63bf:5601:5601]/",        # Teredo, client 169.254.169.254
    "http://2852039166/", "http://0xa9fea9fe/", "http://0251.0376.0251.0376/", "http://169.254.43518/",
    "http://metadata.google.internal/computeMetadata/v1/", "http://instance-data/latest/",
    "http://169.254.169.254.nip.io/", "http://metadata.azure.internal./",
    "http://allowed.example.com@169.254.169.254/", "https://169.254.169.254:443/", "http://169.254.169.254:80@x/",
    "http://[::ffff:169.254.170.2]:8080/",
    "file:///etc/passwd", "gopher://169.254.169.254:80/_GET", "ftp://169.254.169.254/", "dict://169.254.169.254/",
]
NAMES = ["2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "metadata.google.internal",
         "instance-data", "169.254.169.254.nip.io", "metadata.azure.internal", "allowed.example.com", "x"]


def attacker_dns(host, port):
    return ["169.254.169.254"]


GUARDS = {
    "names listed, allow_private": NetGuard(NAMES, allow_private=True, resolver=attacker_dns),
    "every network listed": NetGuard(["0.0.0.0/0", "::/0"], resolver=attacker_dns),
    "every network and name, allow_private": NetGuard(["0.0.0.0/0", "::/0", *NAMES], allow_private=True,
                                                      resolver=attacker_dns),
}


@pytest.fixture(params=list(GUARDS))
def guard(request):
    return GUARDS[request.param]


@pytest.mark.parametrize("url", CORPUS)
def test_the_guard_refuses_every_spelling(guard, url):
    with pytest.raises(URLRefused):
        guard.check(url)


def test_allow_private_still_admits_ordinary_private_addresses_and_an_exact_entry_admits_one_address():
    # The guard is not simply refusing everything.
    NetGuard(["10.0.0.0/8"], allow_private=True).check("http://10.1.2.3/")
    NetGuard(["169.254.170.2"]).check("http://169.254.170.2/v2/credentials")
    with pytest.raises(URLRefused, match="credential range"):
        NetGuard(["169.254.0.0/16"], allow_private=True).check("http://169.254.170.2/")


def _spec(kind, config):
    return CapabilitySpec(name="probe", kind=kind, timeout_s=2, config=config)


@pytest.mark.parametrize("url", CORPUS)
def test_http_capabilities_refuse_the_corpus_before_sending(guard, url, tmp_path):
    executor = HttpExecutor(guard=guard, output_store=FileOutputStore(tmp_path), environ={})
    observation = executor.execute(_spec(Kind.HTTP, {"url": url}), {})
    assert observation.error_code == ErrorCode.PERMISSION_DENIED and "refused" in observation.error_message


@pytest.mark.parametrize("url", CORPUS)
def test_mcp_over_http_refuses_the_corpus(guard, url, tmp_path):
    executor = McpExecutor(guard=guard, output_store=FileOutputStore(tmp_path), environ={})
    observation = executor.execute(_spec(Kind.MCP, {"transport": "http", "url": url, "tool": "t"}), {})
    assert observation.error_code == ErrorCode.PERMISSION_DENIED and "refused" in observation.error_message


def _request():
    return PlanningRequest(run_id="r", goal="g", completion=None, capabilities=(), history=(), previous_plan=(),
                           revision=1, remaining_s=30.0)


@pytest.mark.parametrize("url", CORPUS)
def test_the_llm_planner_refuses_an_endpoint_in_the_corpus(url):
    # Even an administrator's endpoint cannot point at a credential range.
    config = LLMConfig.from_endpoint("bad", {"base_url": url, "allow_private": True}, {"model": "m"}, environ={},
                                     resolver=attacker_dns)
    proposal = LLMPlanner(config, sleep=lambda s: None).propose(_request())
    message = proposal.errors[0].message
    assert proposal.plan is None and message.startswith("planner endpoint unavailable: ")
    # Refused by the guard, or (0251.0376...) not even a URL httpx will send: never an answer.
    assert "refused" in message or "URL is not valid" in message


@pytest.mark.parametrize("url", CORPUS + ["http://127.0.0.1:9/schema.json", "https://json-schema.org/x"])
def test_schema_refs_to_anything_outside_the_schema_are_refused_at_registration(url):
    problems = schemas.problems({"type": "object", "properties": {"a": {"$ref": url}}})
    assert problems and "does not resolve inside the schema" in problems[0]


def test_validation_never_fetches_a_ref(recorder):
    schema = {"type": "object", "properties": {"a": {"$ref": f"{recorder.url}/schema.json"}}}
    assert schemas.problems(schema)
    errors = schemas.errors(schema, {"a": 1})
    assert errors and errors[0][0] == "schema"
    assert recorder.requests == []
