from django.urls import path

from evaluation import views as views_evaluation
from evaluation import views_readiness

app_name = "evaluation"
urlpatterns = [
    path("", views_evaluation.evaluation_index, name="index"),
    path("start/", views_evaluation.evaluation_start, name="start"),
    path("readiness/", views_readiness.readiness_review, name="readiness"),
    path("<id:evaluation_id>/", views_evaluation.evaluation_detail, name="detail"),
    path("<id:evaluation_id>/export.json", views_evaluation.evaluation_export_json, name="export_json"),
    path("runs/<id:run_id>/twins/", views_evaluation.run_twins, name="run_twins"),
    path("<id:evaluation_id>/export.csv", views_evaluation.evaluation_export_csv, name="export_csv"),
]
