"""Leak probes, MCP: a stdio server's stderr is quoted in errors; the secrets it was started with are not."""
from __future__ import annotations

import json
import secrets
import sys

import pytest

from capabilities.models import McpServer

CANARY = f"S3CRET-canary-{secrets.token_hex(6)}"
# A server that dies at start-up, telling its stderr the token it was given (a common "bad token: ..." line).
CRASHING_SERVER = "import os, sys; sys.stderr.write('invalid token: ' + os.environ['PROBE_MCP_TOKEN'] + '\\n'); sys.exit(1)"


@pytest.mark.django_db
class TestListingTools:
    @pytest.fixture
    def server(self, stdio_allowed, monkeypatch):
        monkeypatch.setenv("PROBE_MCP_TOKEN", CANARY)
        return McpServer.objects.create(name="crashing", transport="stdio", command="python",
                                        args=["-c", CRASHING_SERVER], env_vars=["PROBE_MCP_TOKEN"])

    def test_the_api_error_keeps_the_stderr_but_not_the_secret(self, api_for, stdio_allowed, server, caplog):
        response = api_for(stdio_allowed).post(f"/api/mcp-servers/{server.pk}/tools/")
        assert response.status_code >= 400
        text = json.dumps(response.json())
        assert "invalid token" in text and CANARY not in text, text
        assert CANARY not in caplog.text

    def test_the_import_page_error_keeps_the_stderr_but_not_the_secret(self, client_for, stdio_allowed, server):
        page = client_for(stdio_allowed).post(f"/capabilities/mcp-servers/{server.pk}/import/").content.decode()
        assert "invalid token" in page and CANARY not in page


def test_the_crashing_server_really_prints_the_secret(monkeypatch):
    """The probe above would pass vacuously if the server never said it."""
    import subprocess

    monkeypatch.setenv("PROBE_MCP_TOKEN", CANARY)
    assert CANARY in subprocess.run([sys.executable, "-c", CRASHING_SERVER], capture_output=True, text=True).stderr
