"""Plain (synchronous) Django views: `delay()` and `result_sync()` are taskq's calls for
synchronous code (they run on the App's own background event loop); `enqueue_in` writes a
task into the outbox in the view's own transaction (docs/outbox.md)."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from shop.models import Order, Visit
from shop.tasks import app, record_visit, send_receipt
from taskq.errors import ResultTimeout
from taskq.outbox.django import enqueue_in


class OrderFailed(Exception):
    """The order could not be completed after it was saved (`?fail=1`)."""


def visit(request: HttpRequest) -> JsonResponse:
    """Enqueue the recording of a visit and answer at once (202)."""
    handle = record_visit.delay(request.GET.get("path", "/"))
    return JsonResponse({"id": handle.id}, status=202)


def visits(_request: HttpRequest) -> JsonResponse:
    return JsonResponse({"count": Visit.objects.count()})


def task_result(_request: HttpRequest, task_id: str) -> JsonResponse:
    """A task's result, waiting up to 5 s for it (504 if it is not there by then)."""
    try:
        result = app.handle(task_id).result_sync(timeout=5)
    except ResultTimeout as exc:
        return JsonResponse({"id": task_id, "state": exc.state}, status=504)
    return JsonResponse({"id": task_id, "result": result})


def order(request: HttpRequest) -> JsonResponse:
    """Save an order and its receipt task in one transaction: both, or (`?fail=1`: the
    order fails after both were written) neither. The relay publishes the task once the
    transaction commits (`taskq worker shop.tasks:app --outbox sqlite:///db.sqlite3`)."""
    try:
        with transaction.atomic():
            placed = Order.objects.create(item=request.GET.get("item", "book"))
            handle = enqueue_in(send_receipt, placed.pk)
            if request.GET.get("fail"):
                raise OrderFailed(placed.pk)
    except OrderFailed:
        return JsonResponse({"id": handle.id, "saved": False}, status=409)
    return JsonResponse({"order": placed.pk, "id": handle.id}, status=201)


def orders(_request: HttpRequest) -> JsonResponse:
    sent = list(Order.objects.filter(receipt_sent=True).values_list("pk", flat=True))
    return JsonResponse({"count": Order.objects.count(), "receipts_sent": sent})
