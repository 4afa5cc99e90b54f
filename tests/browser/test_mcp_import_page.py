"""A stdio MCP server added and its tools imported in the browser: listing is a button (a POST), not a link."""
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_with_the_stdio_role_imports_a_real_stdio_servers_tool(page, live_server, login, registry,
                                                                       stdio_allowed, settings, shot):
    from capabilities.models import Capability, McpServer
    from core.models import AuditEvent

    settings.AGENTOPS_MCP_STDIO_COMMANDS = ["python -m mcp_server_time"]
    login(stdio_allowed).goto(f"{live_server.url}/capabilities/mcp-servers/new/")
    page.get_by_role("textbox", name="Name").fill("clock")
    page.get_by_role("textbox", name="Command").fill("python")
    page.get_by_role("textbox", name="Args").fill("-m\nmcp_server_time")
    page.get_by_role("button", name="Add server and list its tools").click()
    # The button does what it says: the tools are listed at once, no second click.
    page.get_by_label("Import get_current_time").check()
    page.get_by_label("Side effect of get_current_time").select_option("none")
    page.get_by_label("get_current_time requires approval").uncheck()
    shot("mcp-import-listed")
    page.get_by_role("button", name="Import the ticked tools").click()
    page.wait_for_url(f"{live_server.url}/capabilities/")
    # Opening the import page again (a GET) starts nothing; only the listing POSTs did.
    page.goto(f"{live_server.url}/capabilities/mcp-servers/{McpServer.objects.get(name='clock').pk}/import/")
    page.get_by_role("button", name="List the server's tools").wait_for()
    assert Capability.objects.filter(name="get_current_time", kind="mcp").exists()
    # Listing and importing (which lists again, trusting the server rather than the form) each started it.
    starts = AuditEvent.objects.filter(action="mcp_server.started")
    assert starts.count() == 2
    assert all(e.details["command"] == ["python", "-m", "mcp_server_time"] and e.actor == stdio_allowed
               for e in starts)
