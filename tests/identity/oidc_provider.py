"""A small, real OpenID Connect provider for the single sign-on tests, run as its own process on loopback.

    python tests/identity/oidc_provider.py --port 45678 --state /tmp/op.json

Authorization code flow with PKCE (S256), a login form, RS256 ID tokens signed with authlib's
JOSE, JWKS, userinfo and an RP-initiated logout (end_session) endpoint. The state file (clients,
users with their groups, and `tweaks` that make the next tokens wrong in one way: another
audience, expired, another issuer, another nonce, a key nobody published) is read on every request, so a test changes
a user's groups or disables them between sign-ins by rewriting it. GET /test/events lists what
happened (token exchanges, logouts) for the test to assert on.
"""
from __future__ import annotations

import argparse
import base64
import html
import json
import secrets
import time
from pathlib import Path
from urllib.parse import urlencode

import uvicorn
from authlib.jose import JsonWebKey, jwt
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

KEY = JsonWebKey.generate_key("RSA", 2048, is_private=True, options={"kid": "test-key-1"})
# A key nobody published, under the same kid: what a forger would sign with.
FORGED = JsonWebKey.generate_key("RSA", 2048, is_private=True, options={"kid": "test-key-1"})
SESSION_COOKIE = "op_session"


class Provider:
    def __init__(self, issuer: str, state_path: Path) -> None:
        self.issuer = issuer
        self.state_path = state_path
        self.codes: dict[str, dict] = {}
        self.access_tokens: dict[str, str] = {}
        self.sessions: dict[str, str] = {}
        self.nonces_issued: list[str] = []
        self.events: list[dict] = []

    def state(self) -> dict:
        return json.loads(self.state_path.read_text())

    def client(self, client_id: str) -> dict | None:
        return self.state()["clients"].get(client_id)

    # -- endpoints ---------------------------------------------------------------------------
    async def discovery(self, request: Request) -> Response:
        moved = self.state().get("tweaks", {}).get("discovery", {})
        return JSONResponse({**moved} | {
            "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token", "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks", "end_session_endpoint": f"{self.issuer}/logout",
            "response_types_supported": ["code"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"], "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "scopes_supported": ["openid", "email", "profile", "groups"]} | moved)

    async def jwks(self, request: Request) -> Response:
        return JSONResponse({"keys": [{**KEY.as_dict(is_private=False), "use": "sig", "alg": "RS256"}]})

    async def authorize(self, request: Request) -> Response:
        params = dict(request.query_params) if request.method == "GET" else dict(await request.form())
        client = self.client(params.get("client_id", ""))
        if client is None or params.get("redirect_uri") not in client["redirect_uris"]:
            return HTMLResponse("unknown client or redirect_uri", status_code=400)
        if params.get("response_type") != "code" or "openid" not in params.get("scope", "").split():
            return self._back(params, error="unsupported_response_type")
        if params.get("code_challenge_method") != "S256" or not params.get("code_challenge"):
            return self._back(params, error="invalid_request")
        username = self.sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        if request.method == "POST":
            user = self.state()["users"].get(params.get("username", ""))
            if user is None or user["password"] != params.get("password"):
                return self._form(params, "Wrong username or password.", status=401)
            username = params["username"]
        if username is None:
            return self._form(params)
        user = self.state()["users"].get(username)
        if user is None or user.get("disabled"):
            self.events.append({"event": "refused", "user": username})
            return self._back(params, error="access_denied")
        code = secrets.token_urlsafe(24)
        self.codes[code] = {"client_id": params["client_id"], "redirect_uri": params["redirect_uri"],
                            "user": username, "nonce": params.get("nonce"),
                            "code_challenge": params["code_challenge"], "at": time.time()}
        response = self._back(params, code=code)
        sid = secrets.token_urlsafe(16)
        self.sessions[sid] = username
        response.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="lax")
        return response

    async def token(self, request: Request) -> Response:
        form = dict(await request.form())
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        auth = request.headers.get("authorization", "")
        if auth.startswith("Basic "):
            client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        client = self.client(client_id)
        if client is None or not secrets.compare_digest(client["secret"], secret):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        grant = self.codes.pop(form.get("code", ""), None)  # a code is good once
        if grant is None or grant["client_id"] != client_id or grant["redirect_uri"] != form.get("redirect_uri") \
                or time.time() - grant["at"] > 60:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        if create_s256_code_challenge(form.get("code_verifier", "")) != grant["code_challenge"]:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, status_code=400)
        state = self.state()
        user = state["users"][grant["user"]]
        tweaks = state.get("tweaks", {})
        now = int(time.time()) + int(tweaks.get("exp_offset", 0))
        nonce = grant["nonce"]
        if tweaks.get("nonce") == "previous" and self.nonces_issued:
            nonce = self.nonces_issued[-1]
        self.nonces_issued.append(grant["nonce"])
        claims = {"iss": tweaks.get("iss", self.issuer), "sub": user["sub"], "aud": tweaks.get("aud", client_id),
                  "iat": now, "exp": now + 300, "auth_time": now, "nonce": nonce, **self._profile(user)}
        if "azp" in tweaks:
            claims["azp"] = tweaks["azp"]
        id_token = jwt.encode({"alg": "RS256", "kid": "test-key-1"}, claims,
                              FORGED if tweaks.get("forged") else KEY).decode()
        access_token = secrets.token_urlsafe(24)
        self.access_tokens[access_token] = grant["user"]
        self.events.append({"event": "token", "user": grant["user"], "client_id": client_id,
                            "auth": "basic" if auth.startswith("Basic ") else "post"})
        return JSONResponse({"access_token": access_token, "token_type": "Bearer", "expires_in": 300,
                             "id_token": id_token})

    async def userinfo(self, request: Request) -> Response:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        username = self.access_tokens.get(token)
        if username is None:
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        user = self.state()["users"][username]
        return JSONResponse({"sub": user["sub"], **self._profile(user)})

    async def logout(self, request: Request) -> Response:
        params = request.query_params
        sid = request.cookies.get(SESSION_COOKIE, "")
        ended = self.sessions.pop(sid, None)
        self.events.append({"event": "logout", "user": ended, "client_id": params.get("client_id"),
                            "id_token_hint": bool(params.get("id_token_hint"))})
        client = self.client(params.get("client_id", "")) or {}
        target = params.get("post_logout_redirect_uri", "")
        response: Response
        if target and target in client.get("post_logout_redirect_uris", []):
            response = RedirectResponse(target, status_code=302)
        else:
            response = HTMLResponse("<p>You are signed out.</p>")
        response.delete_cookie(SESSION_COOKIE)
        return response

    async def test_events(self, request: Request) -> Response:
        return JSONResponse(self.events)

    # -- helpers -----------------------------------------------------------------------------
    def _profile(self, user: dict) -> dict:
        return {"email": user.get("email", ""), "preferred_username": user.get("preferred_username", ""),
                "given_name": user.get("given_name", ""), "groups": user.get("groups", [])}

    def _back(self, params: dict, **answer: str) -> Response:
        query = urlencode({**answer, **({"state": params["state"]} if params.get("state") else {})})
        return RedirectResponse(f"{params['redirect_uri']}?{query}", status_code=302)

    def _form(self, params: dict, error: str = "", status: int = 200) -> Response:
        hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                         for k, v in params.items() if k not in ("username", "password"))
        return HTMLResponse(
            f"<!doctype html><title>Test provider</title><h1>Test provider sign-in</h1>"
            f"{f'<p role=alert>{html.escape(error)}</p>' if error else ''}"
            f'<form method="post" action="/authorize">{hidden}'
            f'<label>Username <input name="username"></label><label>Password <input name="password" type="password">'
            f'</label><button type="submit">Sign in</button></form>', status_code=status)


def app(issuer: str, state_path: Path) -> Starlette:
    op = Provider(issuer, state_path)
    return Starlette(routes=[
        Route("/.well-known/openid-configuration", op.discovery), Route("/jwks", op.jwks),
        Route("/authorize", op.authorize, methods=["GET", "POST"]), Route("/token", op.token, methods=["POST"]),
        Route("/userinfo", op.userinfo), Route("/logout", op.logout), Route("/test/events", op.test_events)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    uvicorn.run(app(f"http://127.0.0.1:{args.port}", args.state), host="127.0.0.1", port=args.port,
                log_level="warning")
