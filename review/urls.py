from django.urls import path

from review import views, views_datasets, views_insights, views_queues

app_name = "review"
urlpatterns = [
    path("settings/", views.settings_page, name="settings"),
    path("scores/", views_insights.insights_page, name="insights"),
    path("runs/<id:run_id>/", views.run_panel, name="panel"),
    path("runs/<id:run_id>/scores/", views.score_post, name="score"),
    path("runs/<id:run_id>/comments/", views.comment_post, name="comment"),
    path("runs/<id:run_id>/incident/", views.incident_post, name="incident"),
    path("runs/<id:run_id>/add-to-suite/", views_datasets.add_to_suite, name="add_to_suite"),
    path("comments/<id:annotation_id>/", views.comment_edit, name="comment_edit"),
]

urlpatterns += [
    path("queues/", views_queues.queue_list, name="queues"),
    path("queues/new/", views_queues.queue_form, name="queue_new"),
    path("queues/<id:queue_id>/", views_queues.queue_results, name="queue"),
    path("queues/<id:queue_id>/add-to-suite/", views_datasets.queue_add_to_suite, name="queue_add_to_suite"),
    path("queues/<id:queue_id>/edit/", views_queues.queue_form, name="queue_edit"),
    path("queues/<id:queue_id>/delete/", views_queues.queue_delete, name="queue_delete"),
    path("queues/<id:queue_id>/work/", views_queues.queue_work, name="queue_work"),
    path("queues/<id:queue_id>/next/", views_queues.queue_next, name="queue_next"),
    path("queues/<id:queue_id>/items/<id:item_id>/done/", views_queues.item_done, name="queue_item_done"),
    path("queues/<id:queue_id>/items/<id:item_id>/skip/", views_queues.item_skip, name="queue_item_skip"),
]
