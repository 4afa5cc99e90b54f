from django.urls import path

from review import views, views_datasets, views_insights, views_queues

app_name = "review"
urlpatterns = [
    path("settings/", views.settings_page, name="settings"),
    path("scores/", views_insights.insights_page, name="insights"),
    path("runs/<int:run_id>/", views.run_panel, name="panel"),
    path("runs/<int:run_id>/scores/", views.score_post, name="score"),
    path("runs/<int:run_id>/comments/", views.comment_post, name="comment"),
    path("runs/<int:run_id>/incident/", views.incident_post, name="incident"),
    path("runs/<int:run_id>/add-to-suite/", views_datasets.add_to_suite, name="add_to_suite"),
    path("comments/<int:annotation_id>/", views.comment_edit, name="comment_edit"),
]

urlpatterns += [
    path("queues/", views_queues.queue_list, name="queues"),
    path("queues/new/", views_queues.queue_form, name="queue_new"),
    path("queues/<int:queue_id>/", views_queues.queue_results, name="queue"),
    path("queues/<int:queue_id>/add-to-suite/", views_datasets.queue_add_to_suite, name="queue_add_to_suite"),
    path("queues/<int:queue_id>/edit/", views_queues.queue_form, name="queue_edit"),
    path("queues/<int:queue_id>/delete/", views_queues.queue_delete, name="queue_delete"),
    path("queues/<int:queue_id>/work/", views_queues.queue_work, name="queue_work"),
    path("queues/<int:queue_id>/next/", views_queues.queue_next, name="queue_next"),
    path("queues/<int:queue_id>/items/<int:item_id>/done/", views_queues.item_done, name="queue_item_done"),
    path("queues/<int:queue_id>/items/<int:item_id>/skip/", views_queues.item_skip, name="queue_item_skip"),
]
