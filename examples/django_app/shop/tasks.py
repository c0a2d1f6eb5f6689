"""The shop's tasks and the taskq App that runs them.

Workers run them against this Django project from its directory:

    taskq worker shop.tasks:app

That imports this module first, before Django is set up, so it sets Django up itself (in a
view, Django is set up already and this does nothing).
"""

from __future__ import annotations

import os
from typing import Any

import django
from django.apps import apps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
if not apps.ready:
    django.setup()

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection

from shop.models import Order, Visit
from taskq import App, Middleware, TaskContext
from taskq.middleware import Run


class DjangoConnections(Middleware):
    """Django's per-request connection rule, per task: close connections that are past
    CONN_MAX_AGE or broken before the task and after it. Tasks use the async ORM, which
    runs queries on asgiref's one thread-sensitive thread, and `sync_to_async` (thread
    sensitive too) runs the closing there, where those connections live."""

    async def process(self, ctx: TaskContext, call_next: Run) -> Any:
        await sync_to_async(close_old_connections)()
        try:
            return await call_next()
        finally:
            await sync_to_async(close_old_connections)()


app = App(middleware=[DjangoConnections()])


@app.task
async def record_visit(path: str) -> int:
    visit = await Visit.objects.acreate(path=path)
    return visit.pk


@app.task
async def connection_was_open() -> bool:
    """Whether this task started with a database connection left open (it should not)."""
    return await sync_to_async(lambda: connection.connection is not None)()


@app.task
async def send_receipt(order_id: int) -> int:
    """Mark the order's receipt sent (stands in for an e-mail); enqueued with the order, in
    its transaction, through the outbox (shop.views.order)."""
    order = await Order.objects.aget(pk=order_id)
    order.receipt_sent = True
    await order.asave(update_fields=["receipt_sent"])
    return order.pk
