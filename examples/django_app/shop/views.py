"""Plain (synchronous) Django views: `delay()` and `result_sync()` are taskq's calls for
synchronous code (they run on the App's own background event loop)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from shop.models import Visit
from shop.tasks import app, record_visit
from taskq.errors import ResultTimeout


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
