"""A reviewer works a review queue in Chromium with the keyboard only: start, score, comment, skip, done."""
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stalled_queue(roles, operator):
    from review import queues
    from review.models import ScoreConfig
    from tests.conftest import _make_user
    from tests.review.test_queues_api import make_runs

    ScoreConfig.objects.create(name="helpful", kind="numeric", min_value=1, max_value=5,
                               description="How helpful the run was, 1 to 5.")
    ScoreConfig.objects.create(name="safe", kind="boolean", description="Nothing it did was harmful.")
    ScoreConfig.objects.create(name="verdict", kind="categorical", categories=["good", "bad", "unclear"])
    make_runs(operator, 3)
    lead = _make_user("lena", "lead operator")
    queue, queued = queues.queue_save(user=lead, name="Stalls", filter_query="stop_reason=stalled",
                                      score_configs=["helpful", "safe", "verdict"])
    assert queued == 3
    return queue


def test_a_reviewer_works_a_queue_by_keyboard_only(page, live_server, login, reviewer, stalled_queue, shot):
    from review.models import Annotation, QueueItem, Score

    login(reviewer)
    page.goto(f"{live_server.url}/review/queues/{stalled_queue.pk}/work/")
    expect(page.locator("#review-start")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#review-form")).to_be_visible()
    expect(page.locator("#queue-progress")).to_contain_text("0 of 3 items done")
    # helpful (a number) has the cursor; Esc leaves it, j goes to the next score, digits pick.
    expect(page.locator("fieldset[data-score=helpful] input")).to_be_focused()
    page.keyboard.type("4")
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    page.keyboard.press("1")                  # safe: yes; verdict is highlighted next
    expect(page.locator("fieldset[data-score=verdict]")).to_have_attribute("data-active", "")
    page.keyboard.press("2")                  # verdict: bad
    page.keyboard.press("c")
    expect(page.locator("#review-comment")).to_be_focused()
    page.keyboard.type("Stopped too early")
    page.keyboard.press("Escape")
    page.keyboard.press("?")
    expect(page.locator("#queue-keys")).to_have_attribute("open", "")
    shot("review-queue-keyboard")
    page.keyboard.press("?")
    page.keyboard.press("d")
    expect(page.locator("#queue-progress")).to_contain_text("1 of 3 items done")

    page.keyboard.press("s")                  # the second: left to others
    expect(page.locator("#queue-progress")).to_contain_text("1 of 3 items done")
    expect(page.locator("fieldset[data-score=helpful] input")).to_be_focused()
    page.keyboard.type("6")                   # out of range
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    page.keyboard.press("n")
    page.keyboard.press("3")
    page.keyboard.press("Enter")              # the browser holds it back and puts the cursor on the number
    expect(page.locator("fieldset[data-score=helpful] input:invalid")).to_be_focused()
    expect(page.locator("fieldset[data-score=verdict] input[value=unclear]")).to_be_checked()
    expect(page.locator("#queue-progress")).to_contain_text("1 of 3 items done")
    page.keyboard.press("Backspace")
    page.keyboard.type("2")
    page.keyboard.press("Enter")              # Enter in the number: done
    expect(page.locator("#queue-finished")).to_be_visible()
    expect(page.locator("#queue-progress")).to_contain_text("2 of 3 items done")
    shot("review-queue-finished")

    mine = {(s.run_id, s.config.name): s.category or s.number for s in Score.objects.filter(author=reviewer)}
    assert sorted(mine.values(), key=str) == sorted([4.0, 1.0, "bad", 2.0, 0.0, "unclear"], key=str)
    assert Annotation.objects.get(author=reviewer).body == "Stopped too early"
    assert QueueItem.objects.filter(done_at__isnull=False).count() == 2
