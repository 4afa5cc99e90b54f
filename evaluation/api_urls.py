"""The evaluation API: planning against the direct baseline."""
from django.urls import path

from evaluation import api as api_evaluation

urlpatterns = [
    path("evaluations/", api_evaluation.EvaluationListStartApi.as_view(), name="api-evaluation-list"),
    path("evaluations/<id:evaluation_id>/", api_evaluation.EvaluationDetailApi.as_view(), name="api-evaluation-detail"),
    path("evaluation-suites/", api_evaluation.EvaluationSuiteListApi.as_view(), name="api-evaluation-suite-list"),
    path("evaluation-suites/<id:suite_id>/versions/", api_evaluation.EvaluationSuiteVersionListApi.as_view(),
         name="api-evaluation-suite-versions"),
    path("evaluation-suites/<id:suite_id>/remove-tasks/", api_evaluation.EvaluationSuiteRemoveTasksApi.as_view(),
         name="api-evaluation-suite-remove-tasks"),
]
