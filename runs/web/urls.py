from django.urls import path

from runs.web import views, views_bulk, views_explorer

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("start/", views.run_start_page, name="start"),
    path("bulk/", views_bulk.bulk_preview, name="bulk"),
    path("bulk/start/", views_bulk.bulk_start, name="bulk_start"),
    path("bulk/<id:job_id>/", views_bulk.bulk_job, name="bulk_job"),
    path("approvals/", views.approval_inbox, name="approvals"),
    path("approvals/badge/", views.approval_badge, name="approval_badge"),
    path("approvals/<id:approval_id>/", views.approval_card, name="approval_card"),
    path("approvals/<id:approval_id>/decide/", views.approval_decide, name="approval_decide"),
    path("dashboard/", views.run_dashboard, name="dashboard"),
    path("calls/", views_explorer.call_list, name="calls"),
    path("failures/", views_explorer.failure_groups, name="failures"),
    path("<id:run_id>/", views.run_detail, name="detail"),
    path("<id:run_id>/trace.json", views.trace_download, name="trace_json"),
    path("<id:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<id:run_id>/reconcile/", views.run_reconcile, name="reconcile"),
    path("<id:run_id>/fork/", views.run_fork, name="fork"),
    path("<id:run_id>/attempts/<str:uid>/", views.attempt_detail, name="attempt"),
    path("<id:run_id>/attempts/<str:uid>/output.json", views.attempt_output, name="output"),
]

# Saved views of the runs list (runs.search).
from runs.web import views_search  # noqa: E402

urlpatterns += [
    path("views/save/", views_search.saved_view_save, name="saved_view_save"),
    path("views/<id:view_id>/delete/", views_search.saved_view_delete, name="saved_view_delete"),
]

# A run as a scenario: download, and replay with one response changed (runs.trace.scenario_export).
from runs.web import views_scenario  # noqa: E402

urlpatterns += [
    path("<id:run_id>/scenario.json", views_scenario.scenario_download, name="scenario"),
    path("<id:run_id>/what-if/", views_scenario.scenario_what_if, name="what_if"),
]

# Two runs side by side (runs.trace.compare_page).
from runs.web import views_compare  # noqa: E402

urlpatterns += [
    path("compare/", views_compare.run_compare, name="compare"),
]
