"""AgentOps settings: one module, driven by the environment, failing loudly.

The embedded default (no environment at all) runs on a SQLite file and a
filesystem broker under var/, so a newcomer needs no server. Production sets
DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL (Redis or RabbitMQ).
"""
from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from core.roles import ROLE_PERMISSIONS, role_entry

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false, 1/0, yes/no, on/off), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_json_object(name: str, what: str) -> dict:
    """A JSON object from the environment ({} when unset); `what` names its keys in the error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object of {what}: {exc}") from None
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object of {what}")
    return data


def env_secret_bindings(name: str) -> dict[str, dict[str, list[str]]]:
    """JSON: {"AGENTOPS_NOTIFY_SMTP_PASSWORD": {"hosts": ["smtp.example.com"], "channels": ["ops mail"]}}.

    A notification secret is filled in only for the hosts (required) and channels (optional) named."""
    data = env_json_object(name, "variable names")
    bindings = {}
    for var, binding in data.items():
        if not isinstance(binding, dict) or set(binding) - {"hosts", "channels"}:
            raise ImproperlyConfigured(f"{name}: {var} must map to an object with hosts (and channels)")
        hosts, channels = binding.get("hosts"), binding.get("channels", [])
        if not var.startswith("AGENTOPS_NOTIFY_") or not isinstance(hosts, list) or not hosts or \
                not isinstance(channels, list) or not all(isinstance(v, str) and v for v in hosts + channels):
            raise ImproperlyConfigured(f"{name}: {var}: a variable named AGENTOPS_NOTIFY_* with a non-empty list "
                                       "of hosts and an optional list of channel names")
        bindings[var] = {"hosts": [h.strip().lower() for h in hosts], "channels": channels}
    return bindings


LLM_ENDPOINT_KEYS = {"base_url", "api_key_env", "azure_api_version", "headers", "allow_private"}


def env_llm_endpoints(name: str) -> dict[str, dict]:
    """JSON: {"openai": {"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY"}, ...}."""
    data = env_json_object(name, "named endpoints")
    for key, endpoint in data.items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", key) or not isinstance(endpoint, dict):
            raise ImproperlyConfigured(f"{name}: {key!r} must be a name mapping to an object")
        unknown = set(endpoint) - LLM_ENDPOINT_KEYS
        if unknown:
            raise ImproperlyConfigured(f"{name}: endpoint {key}: unknown keys {sorted(unknown)}; "
                                       f"known: {sorted(LLM_ENDPOINT_KEYS)}")
        url = urlsplit(str(endpoint.get("base_url", "")))
        if url.scheme not in ("http", "https") or not url.hostname or url.username or url.query:
            raise ImproperlyConfigured(f"{name}: endpoint {key}: base_url must be an http(s) URL with a host, "
                                       "no credentials and no query")
        key_env = endpoint.get("api_key_env", "")
        if key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key_env)):
            raise ImproperlyConfigured(f"{name}: endpoint {key}: api_key_env must be a variable NAME")
        headers = endpoint.get("headers", {})
        if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and "\r" not in v + k and "\n" not in v + k
                for k, v in headers.items()):
            raise ImproperlyConfigured(f"{name}: endpoint {key}: headers must map names to one-line strings")
        if not isinstance(endpoint.get("allow_private", False), bool):
            raise ImproperlyConfigured(f"{name}: endpoint {key}: allow_private must be true or false")
    return data


OIDC_ENDPOINT_NAMES = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri",
                       "end_session_endpoint")


def env_oidc_role_map(name: str) -> dict[str, list[str]]:
    """JSON: {"agentops-operators": ["operator"], "agentops-admins": ["registry admin", "lead operator"]}.

    A group's value is a list of roles (core.roles), each held in the default project, or in the
    project a "slug:" prefix names ("payments:operator")."""
    data = env_json_object(name, "group names")
    for group, roles in data.items():
        if isinstance(roles, str):
            roles = data[group] = [roles]
        if not group or not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise ImproperlyConfigured(f"{name}: group {group!r} must map to a list of role names")
        unknown = sorted({role_entry(r)[1] for r in roles} - set(ROLE_PERMISSIONS))
        if unknown:
            raise ImproperlyConfigured(f"{name}: group {group!r}: unknown role {unknown[0]!r}; "
                                       f"roles: {', '.join(ROLE_PERMISSIONS)}")
    return data


def oidc_check_config(issuer: str, client_id: str, client_secret: str, endpoints: dict[str, str]) -> None:
    for label, url in [("AGENTOPS_OIDC_ISSUER", issuer)] + [
            (f"AGENTOPS_OIDC_{key.upper()}", value) for key, value in endpoints.items() if value]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
            # Not the URL itself: its credentials are what is refused.
            raise ImproperlyConfigured(f"{label} must be an http(s) URL with a host and no credentials, "
                                       f"got scheme {parts.scheme!r} and host {parts.hostname!r}")
    if not client_id or not client_secret:
        raise ImproperlyConfigured("single sign-on needs AGENTOPS_OIDC_CLIENT_ID and AGENTOPS_OIDC_CLIENT_SECRET "
                                   "beside AGENTOPS_OIDC_ISSUER (docs/sso.md)")


VAR_DIR = Path(env_str("AGENTOPS_VAR_DIR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

# DEBUG is off unless asked for (DEBUG=true); `python3 agentops/dev.py up` asks for it
# on the embedded default. Its error pages are still cleansed (agentops.debug).
DEBUG = env_bool("DEBUG", False)
DEFAULT_EXCEPTION_REPORTER_FILTER = "agentops.debug.CredentialCleansingFilter"


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. With DEBUG off AgentOps refuses to start without an explicit "
            "SECRET_KEY; generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))'. "
            "For a local try-out, `python3 agentops/dev.py up` (or DEBUG=true) uses a generated key instead, "
            "and `python3 agentops/dev.py manage COMMAND` runs a manage.py command the same way."
        )
    # Generated once for this installation and kept out of git (var/ is ignored).
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

for origin in CSRF_TRUSTED_ORIGINS:
    if urlsplit(origin).scheme not in ("http", "https"):
        raise ImproperlyConfigured(f"CSRF_TRUSTED_ORIGINS entries need a scheme (https://...), got {origin!r}")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_htmx",
    "axes",
    "csp",
    "drf_spectacular_sidecar",
    "template_partials",
    "core",
    "capabilities",
    "runs",
    "notifications",
    "evaluation",
    "gateway",
    "identity",
    "review",
]

MIDDLEWARE = [
    "agentops.middleware.StreamAsMadeMiddleware",
    "agentops.middleware.OutageMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "agentops.middleware.RequestSizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "core.project_access.ProjectMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "axes.middleware.AxesMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "runs.web.context_processors.navigation",
                "core.views_projects.switcher",
                "csp.context_processors.nonce",
            ],
        },
    },
]


def database_config(url: str) -> dict:
    if not url:
        return _sqlite(VAR_DIR / "agentops.sqlite3")
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        path = url.removeprefix("sqlite://").removeprefix("/") if url != "sqlite://" else ""
        if not path:
            raise ImproperlyConfigured("DATABASE_URL sqlite:// needs a file path, e.g. sqlite:////srv/agentops.db")
        return _sqlite(Path("/" + path) if url.startswith("sqlite:////") else BASE_DIR / path)
    if scheme in ("postgres", "postgresql", "pgsql"):
        import dj_database_url

        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
        config["ENGINE"] = "django.db.backends.postgresql"
        # No JIT: every query here is short, and compiling one costs more (100+ ms seen on the
        # dashboard at a million runs) than running it. Options given in the URL win.
        options = config.setdefault("OPTIONS", {})
        options["options"] = ("-c jit=off " + options.get("options", "")).strip()
        return config
    raise ImproperlyConfigured(
        f"DATABASE_URL must start with postgres:// or sqlite://, got scheme {scheme!r}"
    )


def _sqlite(path: Path) -> dict:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # WAL lets the web read while the worker writes; IMMEDIATE takes the write
        # lock at BEGIN so two writers queue on busy_timeout instead of failing
        # with "database is locked" halfway through a transaction.
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
        },
        # A file, not :memory:, so a real worker process sees the test database.
        "TEST": {"NAME": str(path.with_name(path.stem + "-test.sqlite3"))},
    }


DATABASES = {"default": database_config(env_str("DATABASE_URL"))}

# A PostgreSQL streaming replica for pages (core/replica.py): the dashboard, the lists and the
# trace read from it while it holds the reader's own writes and lags at most the bound below;
# the worker, the API, the gateway and every write use the primary.
if env_str("DATABASE_REPLICA_URL"):
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql" or not env_str(
            "DATABASE_REPLICA_URL").startswith(("postgres://", "postgresql://", "pgsql://")):
        raise ImproperlyConfigured("DATABASE_REPLICA_URL needs PostgreSQL for both DATABASE_URL and the replica")
    DATABASES["replica"] = database_config(env_str("DATABASE_REPLICA_URL"))
    # A replica that is down costs a page at most this, then is left alone for a while.
    DATABASES["replica"]["OPTIONS"]["connect_timeout"] = env_int("AGENTOPS_REPLICA_CONNECT_TIMEOUT_S", 2, minimum=1)
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    DATABASE_ROUTERS = ["core.replica.ReplicaRouter"]
    # Outside the session middleware, so a session saved after the view counts as a write.
    MIDDLEWARE.insert(MIDDLEWARE.index("django.contrib.sessions.middleware.SessionMiddleware"),
                      "core.replica.ReplicaMiddleware")
AGENTOPS_REPLICA_MAX_LAG_S = env_int("AGENTOPS_REPLICA_MAX_LAG_S", 5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": env_int("AGENTOPS_PASSWORD_MIN_LENGTH", 10, minimum=8)}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Login throttling (django-axes): the login page and the API's token login ----
# Failures are counted per username and address together, so a guesser cannot lock
# a colleague out from everywhere; the lock lifts after the cool-off.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "core.backends.PasswordBackend",
    # Roles per project (core.backends): signs nobody in, answers has_perm in the project in scope.
    "core.backends.ProjectRoleBackend",
]
AXES_FAILURE_LIMIT = env_int("AGENTOPS_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_int("AGENTOPS_LOGIN_COOLOFF_MINUTES", 15, minimum=1) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "core.accounts.lockout_response"
AXES_VERBOSE = False

# --- Single sign-on with OpenID Connect (identity/, docs/sso.md) -----------------
# On when AGENTOPS_OIDC_ISSUER is set. The provider's endpoints come from its discovery
# document ({issuer}/.well-known/openid-configuration), fetched through the egress guard when
# first needed; any of them may be given explicitly instead. The client secret is read here and
# never logged or shown.
AGENTOPS_OIDC_ISSUER = env_str("AGENTOPS_OIDC_ISSUER").rstrip("/")
AGENTOPS_OIDC_CLIENT_ID = env_str("AGENTOPS_OIDC_CLIENT_ID")
AGENTOPS_OIDC_CLIENT_SECRET = env_str("AGENTOPS_OIDC_CLIENT_SECRET")
AGENTOPS_OIDC_PROVIDER_NAME = env_str("AGENTOPS_OIDC_PROVIDER_NAME", "single sign-on")
AGENTOPS_OIDC_SCOPES = env_str("AGENTOPS_OIDC_SCOPES", "openid email profile")
AGENTOPS_OIDC_ENDPOINTS = {name: env_str(f"AGENTOPS_OIDC_{name.upper()}").strip()
                           for name in OIDC_ENDPOINT_NAMES}
# The claim the groups are read from (a list or one string; "groups", "roles", Google's "hd"...),
# and which roles each group gives: a JSON object {"group": ["role", ...]}. When a role map is set,
# the provider decides: each sign-in makes the user's roles exactly the mapped ones.
AGENTOPS_OIDC_GROUPS_CLAIM = env_str("AGENTOPS_OIDC_GROUPS_CLAIM", "groups")
AGENTOPS_OIDC_ROLE_MAP = env_oidc_role_map("AGENTOPS_OIDC_ROLE_MAP")
# New users are created on their first sign-in (off: only users already linked may sign in).
AGENTOPS_OIDC_CREATE_USERS = env_bool("AGENTOPS_OIDC_CREATE_USERS", True)
# The provider's calls go through the egress guard, admitted to the provider's own hosts only;
# an on-premises provider on a private or loopback address needs this explicit allowance.
AGENTOPS_OIDC_ALLOW_PRIVATE = env_bool("AGENTOPS_OIDC_ALLOW_PRIVATE", False)
AGENTOPS_OIDC_TIMEOUT_S = env_int("AGENTOPS_OIDC_TIMEOUT_S", 10, minimum=1)
# Leeway for the ID token's exp/iat against this server's clock.
AGENTOPS_OIDC_CLOCK_SKEW_S = env_int("AGENTOPS_OIDC_CLOCK_SKEW_S", 60, minimum=0)
# Local passwords (the login form, the API's password login, the admin's): off leaves sign-in to
# the provider. API tokens keep working either way.
AGENTOPS_LOCAL_PASSWORDS = env_bool("AGENTOPS_LOCAL_PASSWORDS", True)
AGENTOPS_OIDC_ENABLED = bool(AGENTOPS_OIDC_ISSUER)
if AGENTOPS_OIDC_ENABLED:
    oidc_check_config(AGENTOPS_OIDC_ISSUER, AGENTOPS_OIDC_CLIENT_ID, AGENTOPS_OIDC_CLIENT_SECRET,
                      AGENTOPS_OIDC_ENDPOINTS)
    AUTHENTICATION_BACKENDS.append("identity.backend.OidcBackend")
elif not AGENTOPS_LOCAL_PASSWORDS:
    raise ImproperlyConfigured("AGENTOPS_LOCAL_PASSWORDS=off needs single sign-on: set AGENTOPS_OIDC_ISSUER "
                               "(docs/sso.md), or nobody could sign in")
if not AGENTOPS_LOCAL_PASSWORDS:
    # No password backend: neither the login form nor the API's password login nor the admin's
    # can authenticate. The OIDC backend (a ModelBackend) still answers superuser and direct permissions.
    AUTHENTICATION_BACKENDS.remove("core.backends.PasswordBackend")
# mozilla-django-oidc's own settings, derived from ours (identity.backend reads the endpoints).
OIDC_RP_CLIENT_ID = AGENTOPS_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = AGENTOPS_OIDC_CLIENT_SECRET
OIDC_RP_SCOPES = AGENTOPS_OIDC_SCOPES
OIDC_RP_SIGN_ALGO = env_str("AGENTOPS_OIDC_SIGN_ALGO", "RS256")
OIDC_USE_PKCE = True
OIDC_STORE_ID_TOKEN = True  # the sign-out's id_token_hint
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc-callback"
OIDC_REDIRECT_REQUIRE_HTTPS = False  # `next` is a path on this site; the provider's URLs are checked apart

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# Static files belong to the code, not to an instance: one folder whatever AGENTOPS_VAR_DIR says.
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# --- Security: secure by default whenever DEBUG is off -------------------------
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS = env_list("SILENCED_SYSTEM_CHECKS")

# --- Content-Security-Policy (django-csp 4): no inline scripts, nothing off-site --
# Scripts come from our static files (htmx included; its config is in a <meta> tag,
# with eval and injected indicator styles off). Inline style *attributes* (progress
# bar widths) are allowed; inline <style> and <script> elements are not.
from csp.constants import NONCE, NONE, SELF  # noqa: E402

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        # Signing out redirects the sign-out form to the provider's end_session_endpoint, and Chromium
        # checks a form's redirects against form-action: the provider's origins, nothing more.
        "form-action": [SELF, *sorted({
            f"{urlsplit(url).scheme}://{urlsplit(url).netloc}"
            for url in [AGENTOPS_OIDC_ISSUER, AGENTOPS_OIDC_ENDPOINTS["end_session_endpoint"]] if url})],
        "frame-ancestors": [NONE],
    },
}

# --- API ----------------------------------------------------------------------
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 1_048_576, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES
# Every JSON body and JSON form field: nesting depth and (form fields) size.
AGENTOPS_JSON_MAX_DEPTH = env_int("AGENTOPS_JSON_MAX_DEPTH", 64, minimum=8)
AGENTOPS_JSON_FIELD_MAX_BYTES = env_int("AGENTOPS_JSON_FIELD_MAX_BYTES", 262_144, minimum=1024)
# API tokens: the longest lifetime a user may give one, and the default.
AGENTOPS_API_TOKEN_MAX_DAYS = env_int("AGENTOPS_API_TOKEN_MAX_DAYS", 365, minimum=1)
AGENTOPS_API_TOKEN_DEFAULT_DAYS = env_int("AGENTOPS_API_TOKEN_DEFAULT_DAYS", 90, minimum=1)

# The MCP gateway (gateway/, docs/planners.md, "gateway"): how long a tools/call waits for an approval
# decision before answering "approval pending", how long for the call's outcome, and how long a
# session may sit idle before it (and its run) ends.
AGENTOPS_GATEWAY_APPROVAL_HOLD_S = env_int("AGENTOPS_GATEWAY_APPROVAL_HOLD_S", 30, minimum=0)
AGENTOPS_GATEWAY_CALL_WAIT_S = env_int("AGENTOPS_GATEWAY_CALL_WAIT_S", 120, minimum=1)
AGENTOPS_GATEWAY_IDLE_TIMEOUT_S = env_int("AGENTOPS_GATEWAY_IDLE_TIMEOUT_S", 1800, minimum=1)
AGENTOPS_GATEWAY_TOKEN_DEFAULT_DAYS = env_int("AGENTOPS_GATEWAY_TOKEN_DEFAULT_DAYS", 90, minimum=1)
# Sessions live in the web process that opened them, which vouches for its open ones every
# quarter of this; a session nobody vouched for this long (its process was killed or restarted)
# is ended by the sweep, and its run stops session_ended.
AGENTOPS_GATEWAY_SESSION_LOST_S = env_int("AGENTOPS_GATEWAY_SESSION_LOST_S", 60, minimum=2)
# A session's run takes these unless its agent says otherwise: every tools/call after the first
# is a plan revision and a planner pass, so those budgets are sized for calls, not replans.
AGENTOPS_GATEWAY_DEFAULT_BUDGETS = {"max_iterations": 2_000, "max_revisions": 1_000, "max_tool_calls": 1_000,
                                    "deadline_s": 3_600.0}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "core.tokens.ApiTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON only: a multipart body on a JSONField was a 500 elsewhere (pitfalls).
    # Bounded depth and size (core.jsonlimits): deep JSON is a 400, not a RecursionError.
    "DEFAULT_PARSER_CLASSES": ["core.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_RATES": {},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AgentOps API",
    "DESCRIPTION": "Operate and review AI agent runs: capabilities, runs, plans, approvals.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Object ids in paths (core.converters): integers of up to 18 digits.
    "PATH_CONVERTER_OVERRIDES": {"id": {"type": "integer", "minimum": 0, "maximum": 999_999_999_999_999_999}},
    # The API docs page is served from our own static files, never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # No badge from validator.swagger.io: nothing on the docs page leaves the server.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "core.choices.RunStatus",
        "SideEffectEnum": "core.choices.SideEffect",
        "DecisionEnum": ["approve", "reject"],  # an approval decision
        "DecisionKindEnum": "core.choices.DecisionKind",
        "ObservationStatusEnum": "core.choices.ObservationStatus",
        "SideEffectStatusEnum": "core.choices.SideEffectStatus",
        "EvaluationStatusEnum": "evaluation.models.Evaluation.Status",
        "BulkActionKindEnum": "runs.models_bulk.BulkActionKind",
        "ScoreKindEnum": "review.models.ScoreKind",
        "IncidentStatusEnum": "review.models.IncidentStatus",
    },
}

# --- Celery -------------------------------------------------------------------
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or "embedded://localhost/"
if urlsplit(CELERY_BROKER_URL).scheme not in ("embedded", "redis", "rediss", "amqp", "amqps", "pyamqp"):
    raise ImproperlyConfigured(
        "CELERY_BROKER_URL must be redis://, amqp:// or empty for the embedded broker, "
        f"got scheme {urlsplit(CELERY_BROKER_URL).scheme!r}"  # not the URL: it may carry the broker's password
    )
if CELERY_BROKER_URL.startswith("embedded://"):
    for sub in ("queue", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        "polling_interval": 0.02,
    }
# The queue the web sends tasks to and workers take them from. Installations sharing one broker
# database keep apart by a queue each (the test suite gives each pytest-xdist worker its own).
CELERY_TASK_DEFAULT_QUEUE = env_str("AGENTOPS_TASK_QUEUE") or "celery"
# How long a worker holds a run before another may take it over. A worker renews its
# lease every third of this while it works (inside a call too) and stretches it to
# cover a call's whole timeout, so this is only how soon a dead worker's run is resumed.
AGENTOPS_RUN_LEASE_SECONDS = env_int("AGENTOPS_RUN_LEASE_SECONDS", 30, minimum=3)
# An unacknowledged task (its worker was killed) is redelivered by Redis after this, not the
# default hour: a lease, a task's slice and a margin. Tasks wait at most 30 s in a countdown
# (longer waits hop), so no waiting task is redelivered early. The orphan sweep sends a task
# again only when nobody claimed its run this long after it was due (runs.worker.queue).
TASK_VISIBILITY_TIMEOUT_S = AGENTOPS_RUN_LEASE_SECONDS + 60
if urlsplit(CELERY_BROKER_URL).scheme in ("redis", "rediss"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": TASK_VISIBILITY_TIMEOUT_S}
elif CELERY_BROKER_URL.startswith("embedded://"):
    # It never redelivers (a task taken by a worker that died is gone): the value is only the
    # sweep's patience, as long as Redis's so both stacks resume a lost task alike.
    CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = TASK_VISIBILITY_TIMEOUT_S
# Results only for tasks that ask for one (Try it): the broker's Redis, files beside the embedded broker.
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND") or (
    "file://" + str(VAR_DIR / "results") if CELERY_BROKER_URL.startswith("embedded://")
    else CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "rpc://")
if CELERY_RESULT_BACKEND.startswith("file://"):
    (VAR_DIR / "results").mkdir(parents=True, exist_ok=True)
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes every database connection before and after each task unless this is
# set, so a worker opened a new PostgreSQL session for every run slice (two per run measured, each
# a backend start and several ms of the worker's CPU). Set, the fixup never closes them (its count
# is never reached); agentops/celery.py closes only the broken and the CONN_MAX_AGE-old ones, as
# Django does around a request.
CELERY_DB_REUSE_MAX = 10**12
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "sweep-overdue-runs": {"task": "runs.sweep_overdue_runs", "schedule": 5.0},
    "requeue-orphaned-runs": {"task": "runs.requeue_orphaned_runs",
                              "schedule": float(max(2, min(30, AGENTOPS_RUN_LEASE_SECONDS // 2)))},
    "fail-stale-evaluations": {"task": "evaluation.fail_stale_evaluations", "schedule": 300.0},
    "worker-heartbeat": {"task": "agentops.heartbeat", "schedule": 15.0},
    "end-lost-gateway-sessions": {"task": "gateway.end_lost_sessions",
                                  "schedule": float(max(1, min(15, AGENTOPS_GATEWAY_SESSION_LOST_S // 2)))},
    "resolve-demo-tickets": {"task": "capabilities.resolve_demo_tickets", "schedule": 10.0},
}

# --- AgentOps -----------------------------------------------------------------
# Four-eyes: an operator may not approve steps of a run they own.
AGENTOPS_FOUR_EYES = env_bool("AGENTOPS_FOUR_EYES", False)
# Python modules whose @capability functions are synced into the registry on migrate.
AGENTOPS_CAPABILITY_MODULES = env_list("AGENTOPS_CAPABILITY_MODULES", "capabilities.demo.functions")
# Outbound HTTP capabilities may reach only these hosts (comma separated; *.example.com).
AGENTOPS_HTTP_ALLOWED_HOSTS = env_list("AGENTOPS_HTTP_ALLOWED_HOSTS")
for _entry in AGENTOPS_HTTP_ALLOWED_HOSTS:   # host:port, [v6]:port, net/len:port admit that port only
    _port = re.fullmatch(r"(?:\[[^\]]*\]|[^:]*):([0-9]+)", _entry)
    if _port and not 0 < int(_port[1]) < 65536:
        raise ImproperlyConfigured(f"AGENTOPS_HTTP_ALLOWED_HOSTS: {_entry}: a port is 1 to 65535")
# Loopback/private addresses are refused unless explicitly allowed (tests, on-prem).
AGENTOPS_HTTP_ALLOW_PRIVATE = env_bool("AGENTOPS_HTTP_ALLOW_PRIVATE", False)
# The model endpoints an LLM planner may use, by name: base URL + the env var holding its key.
# A run names an endpoint; it never gives a URL or a key variable. Empty: the llm planner is off.
AGENTOPS_LLM_ENDPOINTS = env_llm_endpoints("AGENTOPS_LLM_ENDPOINTS")
# Stdio MCP commands that may run (a program name, or an exact command line). Empty: none.
AGENTOPS_MCP_STDIO_COMMANDS = env_list("AGENTOPS_MCP_STDIO_COMMANDS")
# How long "Try it" waits for a worker to run the call, on top of the capability's timeout.
AGENTOPS_TRY_WAIT_SECONDS = env_int("AGENTOPS_TRY_WAIT_SECONDS", 10, minimum=1)
# The Celery queue Try it's task goes to (empty: the default queue, like runs).
AGENTOPS_TRY_QUEUE = env_str("AGENTOPS_TRY_QUEUE")
# Outputs larger than this are stored by reference, not inline.
AGENTOPS_INLINE_OUTPUT_BYTES = env_int("AGENTOPS_INLINE_OUTPUT_BYTES", 16_384, minimum=256)
# How long an approval request stays open before it expires.
# The Phoenix project the OpenTelemetry spans land in (runs.otel); default: OTEL_SERVICE_NAME, else "agentops".
AGENTOPS_OTEL_PROJECT = env_str("AGENTOPS_OTEL_PROJECT")
AGENTOPS_APPROVAL_TTL_SECONDS = env_int("AGENTOPS_APPROVAL_TTL_SECONDS", 86_400, minimum=60)
# Open planning long polls (GET /api/runs/<id>/planning/?wait=N) one user may hold at once, across
# every web process; one more is answered 429 with Retry-After (runs.long_polls).
AGENTOPS_LONG_POLL_MAX_PER_USER = env_int("AGENTOPS_LONG_POLL_MAX_PER_USER", 16, minimum=1)

# --- Integrations (docs/integrations.md) ---------------------------------------
# Where people reach this instance: links in notifications (login required).
AGENTOPS_BASE_URL = env_str("AGENTOPS_BASE_URL", "http://localhost:8000").rstrip("/")
# Notifications: the scheduler looks for events and drains the outbox this often.
AGENTOPS_NOTIFY_INTERVAL_S = env_int("AGENTOPS_NOTIFY_INTERVAL_S", 10, minimum=1)
# A failing channel is retried with exponential backoff (base, cap) up to this many tries.
AGENTOPS_NOTIFY_MAX_ATTEMPTS = env_int("AGENTOPS_NOTIFY_MAX_ATTEMPTS", 8, minimum=1)
AGENTOPS_NOTIFY_BACKOFF_S = env_int("AGENTOPS_NOTIFY_BACKOFF_S", 30, minimum=1)
AGENTOPS_NOTIFY_BACKOFF_CAP_S = env_int("AGENTOPS_NOTIFY_BACKOFF_CAP_S", 3600, minimum=1)
# Channel schemes beyond the ones we send ourselves (json, xml, form, mailto, slack, discord, workflow: their
# connections are pinned to the checked address), allowed by name, e.g. "tgram,ntfys". Apprise
# sends these itself: hosts they take are checked first, but not pinned (docs/integrations.md "Notifications").
AGENTOPS_NOTIFY_EXTRA_SCHEMES = [s.lower() for s in env_list("AGENTOPS_NOTIFY_EXTRA_SCHEMES")]
# Which hosts (and channels) each ${AGENTOPS_NOTIFY_...} secret may be sent to; unbound: never.
AGENTOPS_NOTIFY_SECRET_BINDINGS = env_secret_bindings("AGENTOPS_NOTIFY_SECRET_BINDINGS")
# Retention: finished runs older than this many days are purged daily (0: keep forever).
AGENTOPS_RETENTION_DAYS = env_int("AGENTOPS_RETENTION_DAYS", 0, minimum=0)
if AGENTOPS_RETENTION_DAYS > 36_500:   # a cutoff before year 1 is no date: the daily purge would fail every day
    raise ImproperlyConfigured("AGENTOPS_RETENTION_DAYS is at most 36500 (100 years); 0 keeps everything")
# How long a run-starting request's Idempotency-Key answers its retries with the same run (runs.request_keys).
AGENTOPS_REQUEST_KEY_HOURS = env_int("AGENTOPS_REQUEST_KEY_HOURS", 24, minimum=1)
# PostgreSQL: the attempts table's monthly partitions are created this many months ahead (runs.partitions).
AGENTOPS_ATTEMPT_PARTITIONS_AHEAD = env_int("AGENTOPS_ATTEMPT_PARTITIONS_AHEAD", 3, minimum=1)
# Approvals from Slack and e-mail (docs/integrations.md "Approvals from Slack and e-mail").
# The Slack app's signing secret: interaction requests signed with anything else are refused.
AGENTOPS_SLACK_SIGNING_SECRET = env_str("AGENTOPS_SLACK_SIGNING_SECRET")
# The Slack app's bot token (xoxb-...): every Web API call (slackapp:// channels, replies, users.info).
AGENTOPS_SLACK_BOT_TOKEN = env_str("AGENTOPS_SLACK_BOT_TOKEN")
# Where the Slack Web API lives (a test points it at a local service); its host must pass the egress guard.
AGENTOPS_SLACK_API_URL = env_str("AGENTOPS_SLACK_API_URL", "https://slack.com/api/").rstrip("/") + "/"
# How long an e-mailed decision link works (never past the request's own expiry).
AGENTOPS_EMAIL_LINK_TTL_S = env_int("AGENTOPS_EMAIL_LINK_TTL_S", 86_400, minimum=60)
CELERY_BEAT_SCHEDULE["notifications-tick"] = {"task": "notifications.tick",
                                              "schedule": float(AGENTOPS_NOTIFY_INTERVAL_S)}
CELERY_BEAT_SCHEDULE["purge-old-runs"] = {"task": "runs.purge_old_runs", "schedule": 86_400.0}
CELERY_BEAT_SCHEDULE["forget-request-keys"] = {"task": "runs.forget_request_keys", "schedule": 3_600.0}
CELERY_BEAT_SCHEDULE["attempt-partitions"] = {"task": "runs.ensure_attempt_partitions", "schedule": 21_600.0}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    # An outage's 503 is logged as a warning naming what is down (agentops.outages), not as a 500 error.
    "filters": {"outage_is_not_an_error": {"()": "agentops.middleware.OutageIsNotAnError"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # axes logs every successful login at INFO; lock-outs and failures still show at WARNING.
    # httpx logs every request at INFO (the LLM planner's, MCP's): a line per call, CPU in the worker.
    "loggers": {"django.request": {"filters": ["outage_is_not_an_error"]},
                "django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"},
                "httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}
