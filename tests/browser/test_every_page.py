"""Every page at 1280 and 390 px: nothing wider than the screen, and axe finds nothing (WCAG 2 A/AA and
landmark-unique). Screenshots of each under test-artifacts/pages/."""
import re

import pytest

from tests.browser.conftest import ARTIFACTS

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = (1280, 390)
PLAN = {"plans": [[{"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}]] * 3}
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}

# Best-practice rules outside what the issue asks (landmark-unique is checked): region would want every
# line inside a landmark, heading-order forbids the trace's h3 below an h1 card, and so on.
NOT_CHECKED = ("region", "heading-order", "page-has-heading-one", "landmark-complementary-is-top-level",
               "empty-table-header")


def _stalled(admin):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=admin, goal="Find the teleportation policy", planner="scripted",
                             planner_config=PLAN, completion=FOUND, labels={"team": "payments"})
    engine.run_advance(run_id=run.pk, worker="pages")
    return run


def _found(admin):
    """A run that found the policy at once (compared with the stalled one)."""
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=admin, goal="Find the travel policy", planner="scripted", completion=FOUND,
                             planner_config={"plans": [[{"capability": "search_documents",
                                                         "arguments": {"q": "travel"}}]]})
    engine.run_advance(run_id=run.pk, worker="pages")
    return run


def _waiting(admin):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=admin, goal="Waits for plan approval", planner="scripted", planner_config=PLAN,
                             completion=FOUND, require_plan_approval=True)
    engine.run_advance(run_id=run.pk, worker="pages")
    return run


def _unknown(admin):
    """A run stopped on an unknown outcome, as the worker records it (the reconciliation form shows)."""
    from runs.models import Run

    run = _stalled(admin)
    Run.objects.filter(pk=run.pk).update(stop_reason="terminal_failure:outcome_unknown", stall_kind="",
                                         stop_detail="step s1: create_ticket timed out; its outcome is unknown")
    return run


def _forked(admin):
    """A resume of a stalled run, advanced once: its trace shows where it came from and what it inherited."""
    from runs import forks
    from runs.worker import engine

    run = forks.run_fork(run_id=_stalled(admin).pk, user=admin)
    engine.run_advance(run_id=run.pk, worker="pages")
    return run


def _evaluation(admin):
    from evaluation.services import evaluation_run_now, evaluation_suites_sync

    suite = next(s for s in evaluation_suites_sync() if s.name == "standard")
    return evaluation_run_now(user=admin, suite_id=suite.pk, label="pages")


def _server(admin):
    from capabilities.models import McpServer

    return McpServer.objects.create(name="clock", transport="stdio", command="python", args=["-m", "mcp_server_time"])


def _decide(admin):
    """An e-mailed decision link's token, sent to admin, for a plan waiting for approval."""
    from notifications import email_links
    from runs.models import Approval

    approval = Approval.objects.get(run=_waiting(admin), state="pending")
    return email_links.issue(approval=approval, user=admin)["approve"].split("/decide/")[1].split("/")[0]


def _agent(admin):
    from gateway import services

    return services.agent_save(user=admin, name="triage-bot", owner=admin, capabilities=["search_documents"],
                               description="Answers travel questions")


def _rule(admin):
    from notifications.models import Channel, Rule

    rule = Rule.objects.create(name="stops", event="run_stopped")
    rule.channels.add(Channel.objects.create(name="ops-hook", url="json://hooks.example.com/agentops"))
    return rule


def _spent(admin):
    """Finished runs that spent tokens and cost, labelled, for the usage page: its query."""
    from runs import services
    from runs.worker import engine

    for n, team in enumerate(("payments", "search", "payments")):
        plans = {"plans": [{"steps": [{"capability": "search_documents", "arguments": {"q": "travel"}}],
                            "tokens": 1200 * (n + 1), "cost": 0.25 * (n + 1)}]}
        run = services.run_start(owner=admin, goal=f"Spend {n}", planner="scripted", planner_config=plans,
                                 completion=FOUND, labels={"team": team})
        engine.run_advance(run_id=run.pk, worker="pages")
    return "?window=24h&group=label&label_key=team&measure=cost"


def _channel(admin):
    return _rule(admin).channels.get()


def _bulk(admin):
    """A finished bulk re-run: one run re-run, one skipped (still live), so the problems list shows."""
    from runs import bulk

    _stalled(admin)
    _waiting(admin)
    job = bulk.bulk_start(user=admin, action="fork", query="")
    bulk.bulk_process(job.pk)
    return job


def _queue(admin):
    """A review queue of two stalled runs, the first claimed by the admin (the work page shows it)."""
    from review import queues
    from review.models import ScoreConfig

    _stalled(admin)
    _stalled(admin)
    ScoreConfig.objects.create(name="verdict", kind="categorical", categories=["good", "bad"],
                               description="Was the stop right?")
    ScoreConfig.objects.create(name="helpful", kind="numeric", min_value=1, max_value=5)
    queue, _ = queues.queue_save(user=admin, name="Stalls", filter_query="stop_reason=stalled",
                                 score_configs=["verdict", "helpful"], reviews_per_item=2)
    queues.queue_next(user=admin, queue=queue)
    return queue


def _regression(admin):
    """A suite made from runs, evaluated, grown by a run, evaluated again: the regression view shows."""
    from evaluation.services import evaluation_run_now
    from review import datasets

    add = datasets.suite_add_runs(user=admin, suite="from runs", run_ids=[_found(admin).pk], create=True,
                                  expectation=datasets.Expectation(completion_expected=True, note="keep it"))
    evaluation_run_now(user=admin, suite_id=add.suite.pk)
    datasets.suite_add_runs(user=admin, suite=add.suite.pk, run_ids=[_stalled(admin).pk])
    return evaluation_run_now(user=admin, suite_id=add.suite.pk)


BUILD = {"decide": _decide, "regression": _regression, "bulk": _bulk, "agent": _agent, "rule": _rule, "channel": _channel,
         "stalled": _stalled, "found": _found, "waiting": _waiting, "unknown": _unknown, "forked": _forked,
         "evaluation": _evaluation,
         "server": _server, "spent": _spent, "queue": _queue,
         # Finished runs score themselves (review.autoscores): their cost, split by a label's values.
         "scored": lambda admin: (_spent(admin), "?config=cost&group=label&label_key=team&window=24h")[1],
         "attempt": lambda admin: (lambda a: f"{a.run_id}/attempts/{a.uid}")(
             _stalled(admin).attempts.order_by("id").first())}

PAGES = [
    "/runs/", "/runs/?label=team%3Dpayments&stop_reason=stalled", "/runs/start/", "/runs/approvals/",
    "/runs/dashboard/", "/runs/dashboard/?window=3y", "/runs/{stalled}/", "/runs/{waiting}/", "/runs/{unknown}/",
    "/runs/{forked}/", "/runs/{stalled}/what-if/", "/runs/{attempt}/", "/runs/compare/?a={stalled}&b={found}",
    "/capabilities/", "/capabilities/search_documents/",
    "/capabilities/create_ticket/", "/capabilities/new-capability/", "/capabilities/search_documents/edit/",
    "/capabilities/mcp-servers/new/", "/capabilities/mcp-servers/{server}/import/", "/evaluations/",
    "/evaluations/readiness/", "/evaluations/{evaluation}/", "/notifications/",
    "/notifications/deliveries/", "/notifications/decide/{decide}/", "/account/tokens/", "/account/slack/",
    "/account/password/", "/roles/", "/api/docs/", "/login/", "/agents/", "/agents/{agent}/",
    "/notifications/rules/{rule}/delete/", "/notifications/channels/{channel}/delete/",
    "/audit/", "/audit/?target_type=run&target_id={stalled}",
    "/usage/", "/usage/{spent}", "/usage/?window=3y",
    "/runs/bulk/?query=status%3Dfinished&action=fork&add=&remove=&comment=", "/runs/bulk/{bulk}/",
    "/runs/calls/", "/runs/calls/?q=travel&status=retryable", "/runs/failures/", "/review/settings/",
    "/review/scores/", "/review/scores/{scored}", "/review/queues/", "/review/queues/new/",
    "/review/queues/{queue}/", "/review/queues/{queue}/edit/", "/review/queues/{queue}/work/",
    "/review/queues/{queue}/add-to-suite/",
    "/evaluations/{regression}/", "/review/runs/{found}/add-to-suite/",
    "/runs/bulk/?query=goal%3Dpolicy&action=suite&suite=from+runs&completion_expected=yes&note=",
]


@pytest.fixture
def admin(roles):
    from django.contrib.auth.models import User

    from core.project_access import grant_role

    user = User.objects.create_superuser("ada", "ada@example.com", "pw-ada")
    for role in ("operator", "registry admin"):
        grant_role(user, role)
    return user


def _overflow(page) -> list[str]:
    """The elements that stick out past the right edge of the screen, if the page scrolls sideways."""
    return page.evaluate("""() => {
      const width = document.documentElement.clientWidth;
      if (document.documentElement.scrollWidth <= width) return [];
      // Boxes past the edge, and boxes whose own text runs past them (an unbreakable line).
      const culprits = Array.from(document.querySelectorAll('body *'))
        .filter(e => !e.closest('.table-scroll, .chart-scroll, pre')
                     && (e.getBoundingClientRect().right > width + 1 || e.scrollWidth > e.clientWidth + 1)
                     && getComputedStyle(e).overflowX === 'visible')
        .slice(0, 8)
        .map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className} right=${Math.round(e.getBoundingClientRect().right)}`);
      return [`the page is ${document.documentElement.scrollWidth} px wide`, ...culprits];
    }""")


@pytest.mark.parametrize("template", PAGES)
def test_the_page_fits_the_screen_and_axe_finds_nothing(page, live_server, login, registry, manual_advance, admin,
                                                        template):
    from axe_playwright_python.sync_playwright import Axe

    values = {name: BUILD[name](admin) for name in re.findall(r"{(\w+)}", template)}
    path = template.format(**{k: getattr(v, "pk", v) for k, v in values.items()})
    if template != "/login/":
        login(admin)
    else:
        page.context.clear_cookies()
    axe, problems = Axe(), {}
    (ARTIFACTS / "pages").mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        name = re.sub(r"[^a-z0-9]+", "-", template.lower()).strip("-") or "home"
        page.screenshot(path=str(ARTIFACTS / "pages" / f"{name}-{width}.png"), full_page=True)
        wide = _overflow(page)
        if wide:
            problems[f"{width} px overflow"] = wide
        # Swagger UI's own rendering is the vendor's (its contrast is not ours to fix); the page around it is ours.
        result = axe.run(page, context={"exclude": [["#swagger-ui"]]} if path == "/api/docs/" else None,
                         options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "best-practice"]},
                                  "rules": {rule: {"enabled": False} for rule in NOT_CHECKED}})
        for violation in result.response["violations"]:
            problems.setdefault(f"{width} px axe", []).append(
                (violation["id"], [n["target"] for n in violation["nodes"]][:4]))
    assert problems == {}, path

