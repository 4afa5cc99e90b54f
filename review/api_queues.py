"""Review queues over the API: the pages' services (review.queues), the same permissions."""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import PAGE_PARAMETERS, ApiView, page_response, paginated, validated
from core.permissions import MethodPermission
from core.roles import MANAGE_QUEUES, REVIEW_RUNS
from review import queues
from review.api import AnyValue
from review.models import QueueItem, ReviewQueue

# -- outputs ---------------------------------------------------------------------------------------


class ProgressOutput(serializers.Serializer):
    total = serializers.IntegerField(help_text="Items queued.")
    done = serializers.IntegerField(help_text="Items with every review they need.")
    open = serializers.IntegerField(help_text="Items still wanting a review.")
    disagreements = serializers.IntegerField(help_text="Four-eyes items whose reviewers' scores differ.")
    mine = serializers.IntegerField(help_text="Reviews the caller has done in this queue.")


class QueueOutput(serializers.Serializer):
    id = serializers.IntegerField(source="queue.pk")
    name = serializers.CharField(source="queue.name")
    description = serializers.CharField(source="queue.description")
    filter = serializers.CharField(source="queue.filter_query", help_text="The runs list's query string.")
    score_configs = serializers.ListField(child=serializers.CharField())
    assignees = serializers.ListField(child=serializers.CharField(), help_text="Empty: every reviewer.")
    reviews_per_item = serializers.IntegerField(source="queue.reviews_per_item", help_text="2: four-eyes.")
    active = serializers.BooleanField(source="queue.active", help_text="Queues runs as they finish.")
    created_at = serializers.DateTimeField(source="queue.created_at")
    updated_at = serializers.DateTimeField(source="queue.updated_at")
    progress = ProgressOutput()


class QueueSavedOutput(QueueOutput):
    queued = serializers.IntegerField(help_text="Finished runs this save queued.")


class ReviewOutput(serializers.Serializer):
    reviewer = serializers.CharField(allow_null=True)
    state = serializers.CharField(help_text="claimed, done or skipped.")
    claimed_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    scores = serializers.DictField(source="values", child=AnyValue(allow_null=True),
                                   help_text="Score config name to the value given (done reviews).")
    comment = serializers.CharField(help_text="The comment given with the review (markdown, as written).")


class ItemOutput(serializers.Serializer):
    id = serializers.IntegerField(source="item.pk")
    run = serializers.IntegerField(source="item.run_id")
    goal = serializers.CharField(source="item.run.goal")
    run_status = serializers.CharField(source="item.run.status")
    stop_reason = serializers.CharField(source="item.run.stop_reason")
    state = serializers.CharField(help_text="open, in review or done.")
    done_at = serializers.DateTimeField(source="item.done_at", allow_null=True)
    disagreement = serializers.BooleanField(source="item.disagreement",
                                            help_text="Four-eyes: the reviewers' scores differ.")
    reviews = ReviewOutput(many=True)


class DoneOutput(ItemOutput):
    already_done = serializers.BooleanField(help_text="The caller had finished this review before: nothing written.")


# -- inputs ----------------------------------------------------------------------------------------

class QueueInput(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    description = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    filter = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True,
                                   help_text="A runs-list query string, e.g. status=stopped&label=team%3Dpay.")
    score_configs = serializers.ListField(child=serializers.CharField(max_length=60), max_length=queues.MAX_CONFIGS,
                                          help_text="The names of the score configs reviewers give.")
    assignees = serializers.ListField(child=serializers.CharField(max_length=150), required=False, default=list,
                                      max_length=queues.MAX_ASSIGNEES, help_text="Usernames; empty: every reviewer.")
    reviews_per_item = serializers.IntegerField(min_value=1, max_value=2, default=1, help_text="2: four-eyes.")
    active = serializers.BooleanField(default=True)


class DoneInput(serializers.Serializer):
    scores = serializers.DictField(child=AnyValue(), help_text="Every score config of the queue: name to value.")
    comment = serializers.CharField(max_length=10_000, required=False, default="", allow_blank=True,
                                    help_text="Markdown; a comment on the run, shown in the trace.")


class ItemFilterInput(serializers.Serializer):
    state = serializers.ChoiceField(choices=queues.ITEM_STATES, required=False, default="")


def _queue(queue_id: int) -> ReviewQueue:
    return get_object_or_404(ReviewQueue.objects.prefetch_related("score_configs", "assignees"), pk=queue_id)


def _shown(queue: ReviewQueue, user) -> dict:
    return {"queue": queue, "score_configs": [c.name for c in queue.score_configs.all()],
            "assignees": [u.get_username() for u in queue.assignees.all()],
            "progress": queues.progress(queue, user)}


def _save(request, queue_id: int | None):
    data = validated(QueueInput, request.data)
    queue, queued = queues.queue_save(user=request.user, queue_id=queue_id, filter_query=data.pop("filter"), **data)
    return QueueSavedOutput({**_shown(_queue(queue.pk), request.user), "queued": queued}).data


# -- views -----------------------------------------------------------------------------------------

class QueueListApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_reviewqueue", "POST": MANAGE_QUEUES}

    @extend_schema(operation_id="review_queues_list", responses=QueueOutput(many=True))
    def get(self, request):
        rows = ReviewQueue.objects.prefetch_related("score_configs", "assignees").order_by("name")
        return Response(QueueOutput([_shown(q, request.user) for q in rows], many=True).data)

    @extend_schema(request=QueueInput, responses={201: QueueSavedOutput})
    def post(self, request):
        return Response(_save(request, None), status=201)


class QueueDetailApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_reviewqueue", "PUT": MANAGE_QUEUES, "DELETE": MANAGE_QUEUES}

    @extend_schema(responses=QueueOutput)
    def get(self, request, queue_id: int):
        return Response(QueueOutput(_shown(_queue(queue_id), request.user)).data)

    @extend_schema(request=QueueInput, responses=QueueSavedOutput)
    def put(self, request, queue_id: int):
        _queue(queue_id)
        return Response(_save(request, queue_id))

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, queue_id: int):
        _queue(queue_id)
        queues.queue_delete(user=request.user, queue_id=queue_id)
        return Response(status=204)


def _item(queue: ReviewQueue, item: QueueItem, user, **extra) -> dict:
    return {**ItemOutput(queues.shown_items(queue, [item])[0]).data, **extra}


class QueueNextApi(ApiView):
    """Claim the next item to review (or get back the one the caller holds); 204 when none is left."""
    permission_classes = [MethodPermission]
    required_perms = {"POST": REVIEW_RUNS}

    @extend_schema(request=None, responses={200: ItemOutput, 204: OpenApiResponse(description="Nothing left to review.")})
    def post(self, request, queue_id: int):
        queue = _queue(queue_id)
        item = queues.queue_next(user=request.user, queue=queue)
        return Response(status=204) if item is None else Response(_item(queue, item, request.user))


class QueueItemListApi(ApiView):
    """The queue's results: its items in queued order, with each review and the scores it gave."""
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_queueitem"}
    query_input = ItemFilterInput

    @extend_schema(operation_id="review_queue_items_list", parameters=[ItemFilterInput, *PAGE_PARAMETERS],
                   responses=paginated(ItemOutput))
    def get(self, request, queue_id: int):
        queue = _queue(queue_id)
        paginator_items = queues.results(queue, state=self.query["state"])
        return page_response(self, request, _Shown(queue, paginator_items), ItemOutput)


class _Shown:
    """A queryset of items whose slices come out as ShownItems (a page's worth in three queries)."""

    def __init__(self, queue, items):
        self.queue, self.items = queue, items

    def count(self) -> int:
        return self.items.count()

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, index):
        return queues.shown_items(self.queue, list(self.items[index]))


class QueueItemDetailApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_queueitem"}

    @extend_schema(responses=ItemOutput)
    def get(self, request, queue_id: int, item_id: int):
        queue = _queue(queue_id)
        return Response(_item(queue, get_object_or_404(queues.results(queue), pk=item_id), request.user))


class QueueItemDoneApi(ApiView):
    """Finish the caller's review of an item: every score of the queue, an optional comment. Finishing again
    writes nothing (already_done); an item whose reviews are all taken by others is a 409."""
    permission_classes = [MethodPermission]
    required_perms = {"POST": REVIEW_RUNS}

    @extend_schema(request=DoneInput, responses={200: DoneOutput})
    def post(self, request, queue_id: int, item_id: int):
        queue = _queue(queue_id)
        get_object_or_404(QueueItem, pk=item_id, queue=queue)
        data = validated(DoneInput, request.data)
        item, already = queues.item_done(user=request.user, queue=queue, item_id=item_id, **data)
        return Response(_item(queue, item, request.user, already_done=already))


class QueueItemSkipApi(ApiView):
    """Pass an item to other reviewers: it is not offered to the caller again."""
    permission_classes = [MethodPermission]
    required_perms = {"POST": REVIEW_RUNS}

    @extend_schema(request=None, responses=ItemOutput)
    def post(self, request, queue_id: int, item_id: int):
        queue = _queue(queue_id)
        get_object_or_404(QueueItem, pk=item_id, queue=queue)
        item = queues.item_skip(user=request.user, queue=queue, item_id=item_id)
        return Response(_item(queue, item, request.user))


class ExportQuery(serializers.Serializer):
    file = serializers.ChoiceField(choices=["csv", "json"], required=False, default="csv",
                                     help_text="csv: one row per review; json: one object per item.")


class QueueExportApi(ApiView):
    """The queue's results, streamed: CSV (a row per review, a column per score config) or JSON (the items
    as the items list gives them, in one array)."""
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_queueitem"}
    query_input = ExportQuery

    @extend_schema(parameters=[ExportQuery],
                   responses={(200, "text/csv"): OpenApiTypes.STR, (200, "application/json"): ItemOutput(many=True)})
    def get(self, request, queue_id: int):
        queue = _queue(queue_id)
        fmt = self.query["file"]
        chunks = queues.export_chunks(queue)
        body = _csv(queue, chunks) if fmt == "csv" else _json(chunks)
        response = StreamingHttpResponse(body, content_type="text/csv; charset=utf-8" if fmt == "csv"
                                         else "application/json")
        slug = "".join(ch if ch.isalnum() else "-" for ch in queue.name)[:60] or "queue"
        response["Content-Disposition"] = f'attachment; filename="review-queue-{queue.pk}-{slug}.{fmt}"'
        return response


def _cell(value) -> str:
    text = "" if value is None else json.dumps(value) if isinstance(value, bool) else str(value)
    # A spreadsheet runs a cell that starts with = + - @ as a formula: quote it.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv(queue: ReviewQueue, chunks) -> Iterator[str]:
    configs = [c.name for c in queue.score_configs.all()]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["item", "run", "goal", "stop_reason", "item_state", "disagreement", "reviewer", "review_state",
                     "finished_at", *configs, "comment"])
    for chunk in chunks:
        for shown in chunk:
            item = shown.item
            for review in shown.reviews or [None]:
                head = [item.pk, item.run_id, _cell(item.run.goal), item.run.stop_reason, shown.state,
                        "yes" if item.disagreement else "no"]
                if review is None:
                    writer.writerow([*head, "", "", "", *["" for _ in configs], ""])
                else:
                    writer.writerow([*head, _cell(review.reviewer), review.state,
                                     review.finished_at.isoformat() if review.finished_at else "",
                                     *[_cell(review.values.get(c)) for c in configs], _cell(review.comment)])
        yield out.getvalue()
        out.seek(0)
        out.truncate()


def _json(chunks) -> Iterator[str]:
    yield "["
    first = True
    for chunk in chunks:
        for shown in chunk:
            yield ("" if first else ",") + json.dumps(ItemOutput(shown).data, default=str)
            first = False
    yield "]"
