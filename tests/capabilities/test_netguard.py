"""The outbound allowlist, judged on resolved addresses."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from capabilities.netguard import NetGuard, URLRefused, validate_url


def resolving_to(*addresses):
    return lambda host, port: list(addresses)


def test_it_allows_a_listed_public_host():
    guard = NetGuard(["api.example.com"], resolver=resolving_to("93.184.216.34"))
    target = guard.check("https://api.example.com/v1/tickets")
    assert (target.host, target.port, target.address) == ("api.example.com", 443, "93.184.216.34")


def test_it_refuses_a_host_off_the_allowlist():
    guard = NetGuard(["api.example.com"], resolver=resolving_to("93.184.216.34"))
    with pytest.raises(URLRefused, match="'evil.example.org'.*not on the allowlist"):
        guard.check("https://evil.example.org/")


def test_a_wildcard_matches_subdomains_but_not_the_domain_itself():
    guard = NetGuard(["*.example.com"], resolver=resolving_to("93.184.216.34"))
    guard.check("https://a.b.example.com/")
    with pytest.raises(URLRefused):
        guard.check("https://example.com/")
    with pytest.raises(URLRefused):
        guard.check("https://badexample.com/")


@pytest.mark.parametrize("address, reason", [
    ("127.0.0.1", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("192.168.0.10", "private"),
    ("169.254.10.1", "credential range 169.254.0.0/16"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"),
])
def test_it_refuses_special_addresses_when_a_listed_name_resolves_to_them(address, reason):
    # The host name is on the allowlist; its DNS answer is what is refused (DNS rebinding).
    guard = NetGuard(["rebind.example.com"], resolver=resolving_to(address))
    with pytest.raises(URLRefused, match=f"rebind.example.com.*{reason}"):
        guard.check("http://rebind.example.com/")


def test_a_listed_network_admits_its_addresses_but_not_the_metadata_address():
    guard = NetGuard(["0.0.0.0/0", "::/0"])
    assert guard.check("http://127.0.0.1:8000/").address == "127.0.0.1"
    assert guard.check("http://[::1]/").address == "::1"
    with pytest.raises(URLRefused, match="metadata"):
        guard.check("http://169.254.169.254/latest/meta-data")


def test_it_refuses_an_ip_literal_that_is_not_listed():
    with pytest.raises(URLRefused, match="'127.0.0.1'"):
        NetGuard(["api.example.com"]).check("http://127.0.0.1:8080/")


def test_an_explicitly_listed_address_is_allowed():
    assert NetGuard(["127.0.0.1"]).check("http://127.0.0.1:8080/x").address == "127.0.0.1"
    assert NetGuard(["10.0.0.0/8"]).check("http://10.2.3.4/").address == "10.2.3.4"


def test_allow_private_admits_private_ranges_but_never_metadata():
    guard = NetGuard(["internal.example.com"], allow_private=True, resolver=resolving_to("10.0.0.7"))
    assert guard.check("http://internal.example.com/").address == "10.0.0.7"
    metadata = NetGuard(["internal.example.com"], allow_private=True, resolver=resolving_to("169.254.169.254"))
    with pytest.raises(URLRefused, match="metadata"):
        metadata.check("http://internal.example.com/")


def test_it_refuses_when_any_resolved_address_is_forbidden():
    guard = NetGuard(["mixed.example.com"], resolver=resolving_to("93.184.216.34", "10.0.0.1"))
    with pytest.raises(URLRefused, match="10.0.0.1"):
        guard.check("https://mixed.example.com/")


def test_it_refuses_other_schemes_and_unresolvable_hosts():
    def fails(host, port):
        raise OSError("Name or service not known")

    guard = NetGuard(["api.example.com"], resolver=fails)
    with pytest.raises(URLRefused, match="scheme"):
        guard.check("file:///etc/passwd")
    with pytest.raises(URLRefused, match="does not resolve"):
        guard.check("https://api.example.com/")


def test_validate_url_gives_a_clear_error_at_registration():
    guard = NetGuard(["api.example.com"], resolver=resolving_to("93.184.216.34"))
    validate_url("https://api.example.com/ops/{idempotency_key}", guard)
    with pytest.raises(ValueError, match="not on the allowlist"):
        validate_url("https://other.example.com/", guard)
    with pytest.raises(ValueError, match="metadata"):
        validate_url("http://169.254.169.254/", NetGuard(["169.254.0.0/16"]), resolve=False)
    validate_url("http://169.254.169.254/", NetGuard(["169.254.169.254"]), resolve=False)


@pytest.mark.parametrize("entry, allowed, refused", [
    ("api.example.com:8443", ["https://api.example.com:8443/x"], ["https://api.example.com/x", "http://api.example.com:6379/"]),
    ("*.example.com:443", ["https://a.example.com/x"], ["http://a.example.com/x", "https://a.example.com:8443/"]),
    ("api.example.com", ["https://api.example.com/x", "http://api.example.com:6379/"], []),
    ("93.184.216.34:443", ["https://93.184.216.34/"], ["http://93.184.216.34/", "https://93.184.216.34:6379/"]),
    ("93.184.216.0/24:80", ["http://93.184.216.34/"], ["https://93.184.216.34/"]),
    ("[2606:2800:220:1::]:443", ["https://[2606:2800:220:1::]/"], ["http://[2606:2800:220:1::]/"]),
    ("2606:2800:220:1::", ["https://[2606:2800:220:1::]/", "http://[2606:2800:220:1::]:8080/"], []),
])
def test_an_entry_with_a_port_admits_that_port_only(entry, allowed, refused):
    guard = NetGuard([entry], resolver=resolving_to("93.184.216.34"))
    for url in allowed:
        assert guard.check(url).address in ("93.184.216.34", "2606:2800:220:1::"), url
    for url in refused:
        with pytest.raises(URLRefused, match="not on the allowlist"):
            guard.check(url)


def test_a_host_listed_at_another_port_is_refused_naming_the_port():
    guard = NetGuard(["api.example.com:443", "127.0.0.1:8080"], allow_private=True,
                     resolver=resolving_to("93.184.216.34"))
    with pytest.raises(URLRefused, match="at port 6379"):
        guard.check("http://api.example.com:6379/")
    with pytest.raises(URLRefused, match="at port 6379"):
        guard.check("http://127.0.0.1:6379/")
    validate_url("https://api.example.com/hook", guard, resolve=False)   # registration knows the port too
    with pytest.raises(URLRefused):
        validate_url("http://api.example.com:6379/", guard, resolve=False)


def test_a_port_out_of_range_is_refused_when_the_settings_load():
    env = {**os.environ, "AGENTOPS_HTTP_ALLOWED_HOSTS": "api.example.com:99999", "DEBUG": "true"}
    done = subprocess.run([sys.executable, "-c", "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
                           "'agentops.settings'); django.setup()"], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "AGENTOPS_HTTP_ALLOWED_HOSTS" in done.stderr and "65535" in done.stderr
