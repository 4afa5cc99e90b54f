"""Sign in with the provider in a real browser: its button, its form, back signed in; sign-out ends both sessions."""
import pytest

from tests.browser.test_every_page import NOT_CHECKED, _overflow
from tests.identity.conftest import oidc, oidc_process, sso_settings  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def _axe_problems(page) -> list:
    from axe_playwright_python.sync_playwright import Axe

    result = Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "best-practice"]},
                                      "rules": {rule: {"enabled": False} for rule in NOT_CHECKED}})
    return [(v["id"], [n["target"] for n in v["nodes"]][:4]) for v in result.response["violations"]]


def test_sign_in_with_the_provider_and_out_again(page, live_server, oidc, shot):  # noqa: F811
    oidc.add_user("zoe", groups=["ops"])
    page.goto(f"{live_server.url}/runs/dashboard/")
    page.wait_for_url(f"{live_server.url}/login/**")
    page.get_by_role("link", name="Sign in with Test provider").click()
    page.wait_for_url(f"{oidc.issuer}/authorize**")
    page.get_by_label("Username").fill("zoe")
    page.get_by_label("Password").fill("op-zoe")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/runs/dashboard/")
    assert "zoe · operator" in page.locator("header .user").inner_text()
    shot("sso-signed-in")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{live_server.url}/login/")
    assert [e["user"] for e in oidc.events() if e["event"] == "logout"][-1] == "zoe"
    # Both sessions are over: the button leads to the provider's form again, not straight back in.
    page.get_by_role("link", name="Sign in with Test provider").click()
    page.wait_for_url(f"{oidc.issuer}/authorize**")
    assert page.get_by_role("button", name="Sign in").is_visible()


@pytest.mark.parametrize("local_passwords", [True, False])
def test_the_sign_in_page_fits_and_axe_finds_nothing(page, live_server, oidc, settings, local_passwords):  # noqa: F811
    sso_settings(settings, oidc, local_passwords=local_passwords)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/login/")
        assert page.get_by_role("link", name="Sign in with Test provider").is_visible()
        assert page.get_by_label("Password").count() == (1 if local_passwords else 0)
        assert _overflow(page) == [] and _axe_problems(page) == []
    # A refused sign-in says why, on the same page.
    page.goto(f"{live_server.url}/oidc/callback/?code=forged&state=forged")
    assert "was not started here" in page.get_by_role("alert").inner_text()
    assert _overflow(page) == [] and _axe_problems(page) == []
