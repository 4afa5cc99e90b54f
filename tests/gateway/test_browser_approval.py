"""An MCP client's call to a capability that needs approval is held while an operator approves it in
the inbox in a real browser (Playwright, Debian's Chromium); the same call then returns the result.
Everything is real: uvicorn serving the pages and /mcp/, a Celery worker, the official mcp client."""
from __future__ import annotations

import importlib.util
import re
import threading
from pathlib import Path

import httpx2
import mcp_types as types
import pytest
from conftest import (  # tests/gateway is on sys.path (its conftest)
    running_stack,
    stack_env,
)
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import expect
from sdk_agent import ScriptedModel, run_agent
from threaded import run_in_thread

_spec = importlib.util.spec_from_file_location(
    "browser_conftest_for_gateway", Path(__file__).resolve().parents[1] / "browser" / "conftest.py")
browser_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(browser_conftest)
# The browser tests' fixtures: the system Chromium (never a download) and screenshots under test-artifacts/.
browser_type_launch_args = browser_conftest.browser_type_launch_args
browser_context_args = browser_conftest.browser_context_args
shot = browser_conftest.shot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not browser_conftest.CHROMIUM.exists(), reason="Debian's chromium is not installed")]


@pytest.fixture(scope="module")
def approval_stack(django_db_setup, django_db_blocker, wait_until):
    with django_db_blocker.unblock():
        env = {**stack_env(), "AGENTOPS_GATEWAY_APPROVAL_HOLD_S": "120"}   # long enough for a person
    # A queue of the stack's own: its web sends each run to its own worker, never to the session's
    # worker on the same broker (a busy suite's worker may hold the task while this test waits).
    env["AGENTOPS_TASK_QUEUE"] = f"{env.get('AGENTOPS_TASK_QUEUE', 'agentops')}-approval-stack"
    with running_stack(wait_until, env) as stack:
        yield stack


def held_call(url: str, token: str, box: dict) -> threading.Thread:
    async def call():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=180)
        async with Client(streamable_http_client(url, http_client=http),
                          client_info=types.Implementation(name="browser-test", version="1")) as c:
            return await c.call_tool("gw_approved", {"note": "ship the release notes"})

    def target():
        try:
            box["result"] = run_in_thread(call, timeout=180)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="held-mcp-call")
    thread.start()
    return thread


def log_in(page, url: str, user) -> None:
    """Log in on the stack's uvicorn, which checks passwords with the production hashers (the test
    process's fast MD5 hasher is not among them): the password is stored with the default one."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    password = "pw-" + user.username
    user.password = PBKDF2PasswordHasher().encode(password, PBKDF2PasswordHasher().salt())
    user.save(update_fields=["password"])
    page.goto(f"{url}/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{url}/runs/**")


def test_an_operator_approves_in_the_inbox_and_the_held_mcp_call_returns_the_result(
        approval_stack, agent_token, second_operator, page, shot, wait_until):
    from runs.models import Approval, Attempt

    _, token = agent_token(name="browser-agent")
    box: dict = {}
    thread = held_call(approval_stack.mcp, token, box)
    # A call that ended instead of being held fails the test at once, with its own error.
    wait_until(lambda: box or Approval.objects.filter(state="pending", capability_name="gw_approved").exists(),
               timeout=90, message="the approval request")
    if "error" in box:
        raise box["error"]
    assert thread.is_alive() and not box   # the call is held, not answered "approval pending"

    log_in(page, approval_stack.url, second_operator)
    page.goto(f"{approval_stack.url}/runs/approvals/")
    card = page.locator("article", has_text="gw_approved").first
    expect(card).to_contain_text("ship the release notes")
    shot("gateway-approval-inbox")
    card.get_by_role("button", name=re.compile(r"^Approve step")).click()
    expect(page.locator("body")).to_contain_text("Approved by olga")

    thread.join(timeout=120)
    if "error" in box:
        raise box["error"]
    result = box["result"]
    assert not result.is_error and result.structured_content == {"written": "ship the release notes"}
    run_id = result.meta["agentops/run_id"]
    assert list(Attempt.objects.filter(run_id=run_id).values_list("capability_name", "status")) == [
        ("gw_approved", "ok")]
    (approval,) = Approval.objects.filter(run_id=run_id)
    assert approval.state == "approved" and approval.decided_by == second_operator


def test_an_agents_sdk_agent_waits_on_an_approval_decided_in_the_browser_and_gets_the_result(
        approval_stack, agent_token, second_operator, page, wait_until):
    from runs.models import Approval, Attempt

    _, token = agent_token(name="sdk-approval")
    model = ScriptedModel([("call", "gw_approved", {"note": "rotate the keys"}),
                           ("say", lambda outputs: outputs[-1])])
    box: dict = {}

    def agent():
        try:
            box["result"] = run_agent(approval_stack.mcp, token, model, "Rotate the keys.", timeout_s=150)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=agent, name="sdk-agent")
    thread.start()
    try:
        wait_until(lambda: box or Approval.objects.filter(state="pending", capability_name="gw_approved").exists(),
                   timeout=90, message="the agent's approval request")
        if "error" in box:
            raise box["error"]
        assert thread.is_alive() and not box   # the agent's tool call is held, not answered "pending"

        log_in(page, approval_stack.url, second_operator)
        page.goto(f"{approval_stack.url}/runs/approvals/")
        card = page.locator("article", has_text="gw_approved").first
        expect(card).to_contain_text("rotate the keys")
        card.get_by_role("button", name=re.compile(r"^Approve step")).click()
        expect(page.locator("body")).to_contain_text("Approved by olga")
        thread.join(timeout=300)
    finally:
        model.close()
    if "error" in box:
        raise box["error"]
    # The model's next turn saw the tool's result: the approved write, run once.
    assert box["result"].final_output == '{"written": "rotate the keys"}'
    (approval,) = Approval.objects.filter(capability_name="gw_approved")
    assert approval.state == "approved" and approval.decided_by == second_operator
    assert list(Attempt.objects.filter(run_id=approval.run_id).values_list("capability_name", "status")) == [
        ("gw_approved", "ok")]
