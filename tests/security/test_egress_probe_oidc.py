"""Probes of the egress guard through single sign-on: an address the discovery document names in another
spelling (2130706434, 127.0.0.2%x) passed for a host name and was admitted, so the provider's document
could send the code and the client secret to any address; it is an address, and refused like one."""
from __future__ import annotations

import pytest

from tests.identity.conftest import browserless, oidc, oidc_process  # noqa: F401 (fixtures)

from .test_egress_probe_http import Server

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("host", ["2130706434", "127.0.0.2%x", "0x7f.0.0.2"])
def test_a_token_endpoint_only_the_discovery_document_names_as_an_address_is_refused(
        oidc, browserless, settings, host):  # noqa: F811
    elsewhere = Server("127.0.0.2")
    try:
        settings.AGENTOPS_OIDC_ALLOW_PRIVATE = True
        oidc.add_user("kim", groups=["ops"])
        oidc.tweak(discovery={"token_endpoint": f"http://{host}:{elsewhere.port}/token"})
        hops = browserless.sign_in("kim")
        assert hops["callback"].status_code == 403
        assert "egress guard refused" in hops["callback"].text and "not on the allowlist" in hops["callback"].text
        assert browserless.signed_in_as() is None
        assert elsewhere.connections == 0
    finally:
        elsewhere.close()
