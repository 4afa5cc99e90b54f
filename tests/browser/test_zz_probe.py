import pytest

from tests.browser.test_incident_review import stalled_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_probe(page, live_server, login, registry, manual_advance, operator):
    run = stalled_run(operator)
    page.set_viewport_size({"width": 390, "height": 844})
    login(operator)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    print(page.evaluate("""() => [document.documentElement.scrollWidth, document.body.scrollWidth,
      document.querySelector('main').scrollWidth, document.querySelector('#trace').scrollWidth,
      ...Array.from(document.querySelectorAll('#trace > *')).map(e => e.tagName + '.' + e.className + ' '
        + e.scrollWidth + '/' + Math.round(e.getBoundingClientRect().right))]"""))
    page.screenshot(path="test-artifacts/probe.png", full_page=True)
