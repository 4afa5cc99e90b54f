from django.urls import path

from review import api, api_datasets, api_insights, api_queues

urlpatterns = [
    path("score-configs/", api.ScoreConfigListApi.as_view(), name="api-review-score-config-list"),
    path("score-configs/<id:config_id>/", api.ScoreConfigDetailApi.as_view(), name="api-review-score-config-detail"),
    path("root-causes/", api.RootCauseListApi.as_view(), name="api-review-root-cause-list"),
    path("root-causes/<id:category_id>/", api.RootCauseDetailApi.as_view(), name="api-review-root-cause-detail"),
    path("runs/<id:run_id>/scores/", api.RunScoreListApi.as_view(), name="api-review-run-scores"),
    path("scores/<id:score_id>/", api.ScoreDetailApi.as_view(), name="api-review-score-detail"),
    path("runs/<id:run_id>/annotations/", api.RunAnnotationListApi.as_view(), name="api-review-run-annotations"),
    path("annotations/<id:annotation_id>/", api.AnnotationDetailApi.as_view(), name="api-review-annotation-detail"),
    path("score-insights/", api_insights.ScoreInsightsApi.as_view(), name="api-review-score-insights"),
    path("runs/<id:run_id>/incident/", api.RunIncidentApi.as_view(), name="api-review-run-incident"),
]

urlpatterns += [
    path("queues/", api_queues.QueueListApi.as_view(), name="api-review-queue-list"),
    path("queues/<id:queue_id>/", api_queues.QueueDetailApi.as_view(), name="api-review-queue-detail"),
    path("queues/<id:queue_id>/add-to-suite/", api_datasets.QueueAddToSuiteApi.as_view(),
         name="api-review-queue-add-to-suite"),
    path("queues/<id:queue_id>/next/", api_queues.QueueNextApi.as_view(), name="api-review-queue-next"),
    path("queues/<id:queue_id>/items/", api_queues.QueueItemListApi.as_view(), name="api-review-queue-items"),
    path("queues/<id:queue_id>/items/<id:item_id>/", api_queues.QueueItemDetailApi.as_view(),
         name="api-review-queue-item"),
    path("queues/<id:queue_id>/items/<id:item_id>/done/", api_queues.QueueItemDoneApi.as_view(),
         name="api-review-queue-item-done"),
    path("queues/<id:queue_id>/items/<id:item_id>/skip/", api_queues.QueueItemSkipApi.as_view(),
         name="api-review-queue-item-skip"),
    path("queues/<id:queue_id>/export/", api_queues.QueueExportApi.as_view(), name="api-review-queue-export"),
]
