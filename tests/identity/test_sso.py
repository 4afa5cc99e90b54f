"""Single sign-on against a real OpenID Connect provider process on loopback, through the live server."""
from __future__ import annotations

import httpx
import pytest
from django.contrib.auth import get_user_model

from core.models import AuditEvent
from core.projects import project_scope

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def roles_of(username: str, project: str = "default") -> set[str]:
    """The roles the user holds in the project."""
    user = get_user_model().objects.get(username=username)
    return set(user.project_memberships.filter(project__slug=project).values_list("role__name", flat=True))


class TestSignIn:
    def test_it_creates_the_user_on_first_sign_in_with_the_mapped_roles(self, oidc, browserless):
        oidc.add_user("alice", groups=["ops", "unmapped"], given_name="Alice")
        hops = browserless.sign_in("alice")
        assert hops["callback"].status_code == 302 and hops["callback"].headers["location"] == "/runs/"
        assert browserless.signed_in_as() == "alice"
        user = get_user_model().objects.get(username="alice")
        assert user.email == "alice@example.com" and user.first_name == "Alice" and not user.has_usable_password()
        assert roles_of("alice") == {"operator"}
        assert user.oidc_identities.get().subject == "sub-alice"
        with project_scope(None):   # a change to the instance, not to a project: in no project's log
            assert AuditEvent.objects.filter(action="user.created", target_id=str(user.pk), actor=None,
                                             project=None).exists()
        granted = AuditEvent.objects.get(action="role.granted", target_id=str(user.pk))
        assert granted.details["source"] == "sso" and granted.details["groups"] == ["ops", "unmapped"]
        # The code went to the token endpoint with the client's secret in Basic auth, PKCE included.
        assert [e["auth"] for e in oidc.events() if e["event"] == "token"][-1] == "basic"

    def test_a_changed_group_changes_the_roles_on_the_next_sign_in(self, oidc, browserless, live_server):
        oidc.add_user("bob", groups=["ops"])
        browserless.sign_in("bob")
        assert roles_of("bob") == {"operator"}
        browserless.http.post(f"{live_server.url}/logout/", headers={"X-CSRFToken": browserless.http.cookies.get(
            "csrftoken", "")})
        oidc.set_user("bob", groups=["platform"])
        browserless.http.cookies.clear()
        browserless.sign_in("bob")
        assert browserless.signed_in_as() == "bob"
        assert roles_of("bob") == {"registry admin", "lead operator"}
        revoked = AuditEvent.objects.get(action="role.revoked", details__role="operator")
        assert revoked.actor is None and revoked.details["groups"] == ["platform"]
        assert get_user_model().objects.filter(username__startswith="bob").count() == 1

    def test_a_group_may_give_a_role_in_another_project_and_losing_it_takes_it_away(self, oidc, browserless,
                                                                                     live_server):
        from core.models import Project

        Project.objects.create(slug="payments", name="Payments")
        oidc.add_user("pia", groups=["payments-team"])
        browserless.sign_in("pia")
        assert roles_of("pia", "payments") == {"operator"} and roles_of("pia") == {"viewer"}
        with project_scope(None):   # the grant is in the payments project's log, not the default one's
            granted = AuditEvent.objects.get(action="role.granted", details__project="payments")
        assert granted.details["role"] == "operator" and granted.project.slug == "payments"
        browserless.http.post(f"{live_server.url}/logout/", headers={"X-CSRFToken": browserless.http.cookies.get(
            "csrftoken", "")})
        oidc.set_user("pia", groups=["readers"])
        browserless.http.cookies.clear()
        browserless.sign_in("pia")
        assert roles_of("pia", "payments") == set() and roles_of("pia") == {"viewer"}

    def test_it_goes_back_to_the_page_asked_for(self, oidc, browserless):
        oidc.add_user("nina", groups=["readers"])
        hops = browserless.sign_in("nina", next_path="/capabilities/")
        assert hops["callback"].headers["location"] == "/capabilities/"

    def test_a_local_account_of_the_same_name_is_never_taken_over(self, oidc, browserless, operator):
        oidc.add_user("otto", groups=["readers"])  # the operator fixture is a local "otto"
        browserless.sign_in("otto")
        signed_in = browserless.signed_in_as()
        assert signed_in is not None and signed_in.startswith("otto-") and signed_in != "otto"
        assert roles_of("otto") == {"operator"}


    def test_claims_holding_nul_characters_sign_in_with_them_as_the_replacement_character(self, oidc, browserless):
        """PostgreSQL keeps no NUL in text or JSON: claims holding one made the callback a 500 there."""
        oidc.add_user("nula", groups=["ops\x00x", "ops"], given_name="Ni\x00na", email="nu\x00la@example.com",
                      sub="sub-nu\x00la")
        hops = browserless.sign_in("nula")
        assert hops["callback"].status_code == 302, hops["callback"].text[:300]
        user = get_user_model().objects.get(username="nula")
        assert (user.first_name, user.email) == ("Ni\ufffdna", "nu\ufffdla@example.com")
        assert user.oidc_identities.get().subject == "sub-nu\ufffdla"
        assert user.oidc_identities.get().groups == ["ops\ufffdx", "ops"] and roles_of("nula") == {"operator"}


class TestRefusals:
    def test_a_user_disabled_at_the_provider_is_refused(self, oidc, browserless):
        oidc.add_user("carol", groups=["ops"], disabled=True)
        hops = browserless.sign_in("carol")
        assert hops["callback"].status_code == 403
        assert "refused the sign-in (access_denied)" in hops["callback"].text
        assert browserless.signed_in_as() is None
        assert not get_user_model().objects.filter(username="carol").exists()

    def test_a_subject_longer_than_openid_connect_allows_is_refused(self, oidc, browserless):
        """OpenID Connect's sub is at most 255 characters; a longer one failed the write on PostgreSQL (a 500)."""
        oidc.add_user("long", groups=["ops"], sub="s" * 256)
        hops = browserless.sign_in("long")
        assert hops["callback"].status_code == 403 and "255 characters" in hops["callback"].text
        assert not get_user_model().objects.filter(username="long").exists()

    def test_a_user_disabled_in_agentops_is_refused(self, oidc, browserless):
        oidc.add_user("dave", groups=["ops"])
        browserless.sign_in("dave")
        get_user_model().objects.filter(username="dave").update(is_active=False)
        browserless.http.cookies.clear()
        hops = browserless.sign_in("dave")
        assert hops["callback"].status_code == 403 and "disabled in AgentOps" in hops["callback"].text
        assert browserless.signed_in_as() is None

    def test_deactivating_a_user_ends_their_open_session(self, oidc, browserless):
        oidc.add_user("dora", groups=["ops"])
        browserless.sign_in("dora")
        assert browserless.signed_in_as() == "dora"
        get_user_model().objects.filter(username="dora").update(is_active=False)
        assert browserless.signed_in_as() is None

    @pytest.mark.parametrize("tweak,reason", [
        ({"aud": "another-client"}, "issued for another client (audience)"),
        ({"aud": ["agentops", "another-client"], "azp": "another-client"}, "issued for another client (azp)"),
        ({"exp_offset": -3600}, "The ID token has expired"),
        ({"iss": "http://127.0.0.1:1"}, "issued by another issuer"),
        ({"forged": True}, "The ID token is not valid (InvalidSignatureError)"),
    ])
    def test_a_wrong_id_token_is_refused(self, oidc, browserless, tweak, reason):
        oidc.add_user("erin", groups=["ops"])
        oidc.tweak(**tweak)
        hops = browserless.sign_in("erin")
        assert hops["callback"].status_code == 403, hops["callback"].text[:500]
        assert reason in hops["callback"].text
        assert browserless.signed_in_as() is None
        assert not get_user_model().objects.filter(username="erin").exists()

    def test_a_wrong_client_secret_says_so_without_showing_it(self, oidc, browserless, settings, caplog):
        oidc.add_user("lou", groups=["ops"])
        settings.AGENTOPS_OIDC_CLIENT_SECRET = "wrong-secret-that-must-not-show"
        hops = browserless.sign_in("lou")
        assert hops["callback"].status_code == 403
        assert "did not exchange the code: The provider answered HTTP 401 (invalid_client)" in hops["callback"].text
        assert "wrong-secret-that-must-not-show" not in hops["callback"].text + caplog.text

    def test_a_replayed_callback_is_refused(self, oidc, browserless, live_server):
        oidc.add_user("fred", groups=["ops"])
        hops = browserless.sign_in("fred")
        assert browserless.signed_in_as() == "fred"
        # Another browser replays the same callback URL (state and code): no session of its own knows the state.
        thief = type(browserless)(live_server.url)
        replay = thief.http.get(hops["callback_url"])
        assert replay.status_code in (302, 400) and thief.signed_in_as() is None
        # The same browser replaying it: the state was used up on the first callback.
        again = browserless.http.get(hops["callback_url"])
        assert again.status_code == 400 and "already used" in again.text

    def test_an_id_token_with_a_replayed_nonce_is_refused(self, oidc, browserless):
        oidc.add_user("gina", groups=["ops"])
        browserless.sign_in("gina")
        browserless.http.cookies.clear()
        oidc.tweak(nonce="previous")  # the provider hands back the first sign-in's nonce
        hops = browserless.sign_in("gina")
        assert hops["callback"].status_code == 403 and "nonce" in hops["callback"].text
        assert browserless.signed_in_as() is None

    def test_no_new_user_when_creation_is_off(self, oidc, browserless, settings):
        settings.AGENTOPS_OIDC_CREATE_USERS = False
        oidc.add_user("hank", groups=["ops"])
        hops = browserless.sign_in("hank")
        assert hops["callback"].status_code == 403 and "No AgentOps account is linked" in hops["callback"].text
        assert not get_user_model().objects.filter(username="hank").exists()

    def test_the_egress_guard_refuses_a_name_resolving_to_loopback_without_the_allowance(
            self, oidc, browserless, settings):
        settings.AGENTOPS_OIDC_ISSUER = oidc.issuer.replace("127.0.0.1", "localhost")
        page = browserless.get("/oidc/authenticate/")
        assert page.status_code == 502 and "egress guard refused" in page.text and "loopback" in page.text
        # AGENTOPS_OIDC_ALLOW_PRIVATE admits it: the provider is reached (and its document, which names
        # 127.0.0.1 as the issuer, is then refused for naming another issuer).
        settings.AGENTOPS_OIDC_ALLOW_PRIVATE = True
        page = browserless.get("/oidc/authenticate/")
        assert page.status_code == 502 and "names another issuer" in page.text

    def test_the_guard_refuses_an_address_only_the_discovery_document_names(self, oidc, browserless):
        oidc.add_user("kim", groups=["ops"])
        oidc.tweak(discovery={"token_endpoint": "http://10.11.12.13/token"})
        hops = browserless.sign_in("kim")
        assert hops["callback"].status_code == 403
        assert "egress guard refused" in hops["callback"].text and "10.11.12.13" in hops["callback"].text
        assert browserless.signed_in_as() is None


class TestThroughTheWorker:
    def test_an_sso_users_machine_token_runs_under_the_roles_their_groups_give(
            self, oidc, browserless, live_server, celery_worker, wait_until):
        """Roles mapped from the provider are what the API and the worker check: a run started with the
        user's API token completes through the real worker; a group lost at the provider takes the right away."""
        from capabilities.kinds.python.sync import python_capabilities_sync
        from runs.models import Run

        python_capabilities_sync()
        oidc.add_user("max", groups=["ops"])
        browserless.sign_in("max")
        made = browserless.http.post(f"{live_server.url}/api/tokens/", json={"name": "agent"},
                                     headers={"X-CSRFToken": browserless.http.cookies.get("csrftoken", "")})
        key = made.json()["key"]
        body = {"goal": "Find the travel policy", "planner": "scripted",
                "planner_config": {"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]},
                "completion": {"capability": "search_documents", "path": "documents.0.id", "exists": True}}
        machine = httpx.Client(headers={"Authorization": f"Token {key}"}, timeout=20)
        started = machine.post(f"{live_server.url}/api/runs/start/", json=body)
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        wait_until(lambda: Run.objects.get(pk=run_id).status == "completed", message="the run to complete")
        assert Run.objects.get(pk=run_id).owner.username == "max"
        oidc.set_user("max", groups=["readers"])
        browserless.http.cookies.clear()
        browserless.sign_in("max")
        assert roles_of("max") == {"viewer"}
        assert machine.post(f"{live_server.url}/api/runs/start/", json=body).status_code == 403
        assert machine.get(f"{live_server.url}/api/runs/{run_id}/").status_code == 200
        machine.close()


class TestSignOutAndPasswords:
    def test_sign_out_ends_the_provider_session(self, oidc, browserless, live_server):
        oidc.add_user("ivan", groups=["ops"])
        browserless.sign_in("ivan")
        out = browserless.http.post(f"{live_server.url}/logout/",
                                    headers={"X-CSRFToken": browserless.http.cookies.get("csrftoken", "")})
        assert out.status_code == 302 and out.headers["location"].startswith(f"{oidc.issuer}/logout?")
        back = browserless.http.get(out.headers["location"])
        assert back.status_code == 302 and back.headers["location"] == f"{live_server.url}/login/"
        logout = [e for e in oidc.events() if e["event"] == "logout"][-1]
        assert logout == {"event": "logout", "user": "ivan", "client_id": "agentops", "id_token_hint": True}
        assert browserless.signed_in_as() is None
        # The provider's session is gone too: the next sign-in asks for the password again.
        assert browserless.get("/oidc/authenticate/").status_code == 302
        form = browserless.http.get(browserless.get("/oidc/authenticate/").headers["location"])
        assert form.status_code == 200 and "Test provider sign-in" in form.text

    def test_a_local_sign_out_stays_local(self, oidc, client, operator):
        client.force_login(operator)
        response = client.post("/logout/")
        assert response.status_code == 302 and response["Location"] == "/login/"

    def test_password_lock_out_still_holds_beside_single_sign_on(self, oidc, client, operator, settings):
        for _ in range(settings.AXES_FAILURE_LIMIT):
            client.post("/login/", {"username": "otto", "password": "wrong"})
        locked = client.post("/login/", {"username": "otto", "password": "pw-otto"})
        assert locked.status_code == 429 and "_auth_user_id" not in client.session
        # The CSP is the same everywhere, the provider's origin admitted only as a form's target.
        header = client.get("/login/")["Content-Security-Policy"]
        policy = dict(d.strip().partition(" ")[::2] for d in header.split(";"))
        assert policy["form-action"] == f"'self' {oidc.issuer}" and policy["script-src"] == "'self'"

    def test_the_login_page_shows_the_button_and_the_form(self, oidc, client):
        page = client.get("/login/").content.decode()
        assert "Sign in with Test provider" in page and 'name="password"' in page
        assert "s3cret" not in page

    def test_with_local_passwords_off_only_the_provider_signs_in_and_tokens_still_work(
            self, oidc, browserless, settings, live_server, operator):
        from tests.identity.conftest import sso_settings

        sso_settings(settings, oidc, local_passwords=False)
        page = browserless.get("/login/")
        assert "Sign in with Test provider" in page.text and 'name="password"' not in page.text
        csrf = browserless.http.cookies.get("csrftoken", "")
        refused = browserless.http.post(f"{live_server.url}/login/", data={"username": "otto", "password": "pw-otto"},
                                        headers={"X-CSRFToken": csrf})
        assert refused.status_code == 403 and "Local passwords are turned off" in refused.text
        api_login = httpx_post(f"{live_server.url}/api/auth/token/", {"username": "otto", "password": "pw-otto"})
        assert api_login.status_code == 403 and "Local passwords are turned off" in api_login.text
        # A machine's API token, made by an SSO user, keeps working.
        oidc.add_user("jane", groups=["ops"])
        browserless.sign_in("jane")
        made = browserless.http.post(f"{live_server.url}/api/tokens/", json={"name": "ci"},
                                     headers={"X-CSRFToken": browserless.http.cookies.get("csrftoken", "")})
        assert made.status_code == 201, made.text
        key = made.json()["key"]
        password_page = browserless.get("/account/password/")
        assert password_page.status_code == 302 and password_page.headers["location"] == "/account/tokens/"
        runs = httpx_get(f"{live_server.url}/api/runs/", key)
        assert runs.status_code == 200


def httpx_post(url, data):
    return httpx.post(url, json=data)


def httpx_get(url, key):
    return httpx.get(url, headers={"Authorization": f"Token {key}"})
