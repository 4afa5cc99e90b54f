"""The demo (seed_demo, run by `dev.py up`) lives in a project of its own, where its people hold their roles."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import RequestFactory

from core.models import Project
from core.project_access import request_project_id, roles_in
from core.projects import project_scope
from runs.models import Run

pytestmark = pytest.mark.django_db


def test_the_demo_is_in_the_demo_project_and_its_people_act_there(roles, manual_advance):
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115 - the command's output is not the test
    demo = Project.objects.get(slug="demo")
    with project_scope(None):
        assert set(Run.objects.values_list("project_id", flat=True)) == {demo.pk}
        assert Run.objects.count() == 5
    assert roles_in(User.objects.get(username="operator"), demo.pk) == ["operator"]
    assert roles_in(User.objects.get(username="viewer"), demo.pk) == ["viewer"]
    request = RequestFactory().get("/")
    request.session = {}
    # The superuser holds every project (the empty Default one too), and acts in the demo first.
    assert request_project_id(request, User.objects.get(username="admin")) == demo.pk
    assert request_project_id(request, User.objects.get(username="registry")) == demo.pk
