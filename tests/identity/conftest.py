"""Single sign-on tests: a real OpenID Connect provider process on loopback (oidc_provider.py)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest

PROVIDER = Path(__file__).with_name("oidc_provider.py")
CLIENT_ID, CLIENT_SECRET = "agentops", "s3cret-client-value-for-tests"
ROLE_MAP = {"ops": ["operator"], "platform": ["registry admin", "lead operator"], "readers": ["viewer"],
            # A role in another project (its slug first): the provider decides there too.
            "payments-team": ["payments:operator", "viewer"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OidcProvider:
    def __init__(self, port: int, state_path: Path) -> None:
        self.port, self.state_path = port, state_path
        self.issuer = f"http://127.0.0.1:{port}"

    def reset(self, redirect_base: str) -> None:
        self.write({"clients": {CLIENT_ID: {"secret": CLIENT_SECRET,
                                            "redirect_uris": [f"{redirect_base}/oidc/callback/"],
                                            "post_logout_redirect_uris": [f"{redirect_base}/login/"]}},
                    "users": {}, "tweaks": {}})

    def write(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_path)

    def edit(self, change) -> None:
        state = json.loads(self.state_path.read_text())
        change(state)
        self.write(state)

    def add_user(self, username: str, *, groups=(), disabled=False, **profile) -> None:
        self.edit(lambda s: s["users"].__setitem__(username, {
            "password": f"op-{username}", "sub": f"sub-{username}", "email": f"{username}@example.com",
            "preferred_username": username, "groups": list(groups), "disabled": disabled, **profile}))

    def set_user(self, username: str, **fields) -> None:
        self.edit(lambda s: s["users"][username].update(fields))

    def tweak(self, **tweaks) -> None:
        self.edit(lambda s: s.__setitem__("tweaks", tweaks))

    def events(self) -> list[dict]:
        return httpx.get(f"{self.issuer}/test/events").json()


@pytest.fixture(scope="session")
def oidc_process(tmp_path_factory):
    port = _free_port()
    state_path = tmp_path_factory.mktemp("op") / "state.json"
    provider = OidcProvider(port, state_path)
    provider.reset("http://127.0.0.1")
    proc = subprocess.Popen([sys.executable, str(PROVIDER), "--port", str(port), "--state", str(state_path)])
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=1).raise_for_status()
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("the test OpenID Connect provider did not start") from None
            time.sleep(0.1)
    yield provider
    proc.terminate()
    proc.wait(timeout=10)


def sso_settings(settings, provider: OidcProvider, *, role_map=None, local_passwords=True) -> None:
    """What the AGENTOPS_OIDC_* environment sets (agentops/settings.py), for this provider."""
    from identity import provider as op

    settings.AGENTOPS_OIDC_ISSUER = provider.issuer
    settings.AGENTOPS_OIDC_ENABLED = True
    settings.AGENTOPS_OIDC_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.AGENTOPS_OIDC_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.AGENTOPS_OIDC_PROVIDER_NAME = "Test provider"
    settings.AGENTOPS_OIDC_ROLE_MAP = ROLE_MAP if role_map is None else role_map
    # The guard's default: the issuer's loopback address is admitted because it is the one configured
    # (as an address on AGENTOPS_HTTP_ALLOWED_HOSTS is); a host name resolving there would not be.
    settings.AGENTOPS_OIDC_ALLOW_PRIVATE = False
    backends = [b for b in settings.AUTHENTICATION_BACKENDS if b != "identity.backend.OidcBackend"]
    if not local_passwords:
        backends.remove("core.backends.PasswordBackend")
    settings.AUTHENTICATION_BACKENDS = [*backends, "identity.backend.OidcBackend"]
    settings.AGENTOPS_LOCAL_PASSWORDS = local_passwords
    csp = {**settings.CONTENT_SECURITY_POLICY, "DIRECTIVES": dict(settings.CONTENT_SECURITY_POLICY["DIRECTIVES"])}
    csp["DIRECTIVES"]["form-action"] = [*settings.CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"],
                                        provider.issuer]
    settings.CONTENT_SECURITY_POLICY = csp
    op.forget()


@pytest.fixture
def oidc(oidc_process, settings, live_server, roles):
    oidc_process.reset(live_server.url)
    sso_settings(settings, oidc_process)
    yield oidc_process
    from identity import provider as op

    op.forget()


class Browserless:
    """A real HTTP client (cookies, redirects by hand) for the product's live server and the provider."""

    def __init__(self, live_url: str) -> None:
        self.live_url = live_url
        self.http = httpx.Client(timeout=20)

    def get(self, url: str, **kw) -> httpx.Response:
        return self.http.get(urljoin(self.live_url + "/", url), **kw)

    def sign_in(self, username: str, password: str | None = None, *, next_path: str = "") -> dict:
        """Click "Sign in with", fill the provider's form, follow back; returns each hop's response."""
        start = self.get("/oidc/authenticate/" + (f"?next={next_path}" if next_path else ""))
        assert start.status_code == 302, start.text[:300]
        authorize = start.headers["location"]
        form = self.http.get(authorize)
        hops = {"start": start, "authorize_url": authorize, "form": form}
        if form.status_code == 302:  # the provider remembered the user
            back = form
        else:
            assert form.status_code == 200, form.text[:300]
            params = {k: v[0] for k, v in parse_qs(urlsplit(authorize).query).items()}
            back = self.http.post(authorize.split("?")[0], data={**params, "username": username,
                                                                  "password": password or f"op-{username}"})
        hops["back"] = back
        if back.status_code != 302:
            return hops
        hops["callback_url"] = back.headers["location"]
        hops["callback"] = self.http.get(hops["callback_url"])
        return hops

    def signed_in_as(self) -> str | None:
        page = self.get("/account/tokens/")
        if page.status_code != 200:
            return None
        import re

        match = re.search(r'title="API tokens and password"[^>]*>([^<·]+)', page.text)
        return match.group(1).strip() if match else None


@pytest.fixture
def browserless(live_server):
    client = Browserless(live_server.url)
    yield client
    client.http.close()
