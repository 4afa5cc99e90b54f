"""The gateway serves each agent its own project: its registry, its runs, its owner's roles there.

A real uvicorn and a real Celery worker. The same capability name is registered in two projects and
disabled in one: the agent of the other still calls it, its run is recorded in its own project,
and nobody of the first project can read that run."""
from __future__ import annotations

import anyio  # noqa: F401 - the client below runs on it
import pytest
from test_mcp_client import client, run

from capabilities.models import Capability
from core.models import Project
from core.project_access import grant_role
from core.projects import project_scope
from runs.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_agent_calls_its_own_projects_registry_and_its_run_stays_there(gateway_stack, agent_token, operator,
                                                                          api_for, django_user_model):
    from io import StringIO

    from django.core.management import call_command

    from capabilities.kinds.python.sync import python_capabilities_sync
    from capabilities.policy import capability_set_enabled

    zebra = Project.objects.create(slug="zebra", name="Zebra")
    zoe = django_user_model.objects.create_user("zoe", password="pw-zoe")
    for role in ("operator", "registry admin"):
        grant_role(zoe, role, zebra)
    with project_scope(zebra):
        python_capabilities_sync(modules=("capabilities.demo.functions", "gw_capabilities"))
    out = StringIO()
    call_command("create_agent", "striped", "--owner", "zoe", "--capability", "gw_echo", "--project", "zebra",
                 stdout=out)
    zebra_token = out.getvalue().strip().splitlines()[-1]
    _, default_token = agent_token()   # the default project's agent: gw_echo, gw_flaky, gw_approved
    registry_admin = django_user_model.objects.create_user("ria", password="pw-ria")
    grant_role(registry_admin, "registry admin")
    capability_set_enabled(user=registry_admin, capability_id=Capability.objects.get(name="gw_echo").pk, enabled=False)

    async def go(token, call):
        async with client(gateway_stack.mcp, token) as c:
            tools = sorted(t.name for t in (await c.list_tools()).tools)
            return tools, (await c.call_tool("gw_echo", {"text": "stripes"}) if call else None)

    zebra_tools, result = run(go, zebra_token, True)
    default_tools, _ = run(go, default_token, False)
    assert zebra_tools == ["gw_echo"] and "gw_echo" not in default_tools and "gw_flaky" in default_tools
    assert not result.is_error and result.structured_content == {"echo": "stripes"}
    run_id = result.meta["agentops/run_id"]
    with project_scope(None):
        assert Run.objects.get(pk=run_id).project_id == zebra.pk
    assert api_for(operator).get(f"/api/runs/{run_id}/").status_code == 404
    assert api_for(zoe).get(f"/api/runs/{run_id}/").json()["labels"]["agent"] == "striped"
