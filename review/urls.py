from django.urls import path

from review import views, views_datasets, views_insights

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
