from __future__ import annotations

from django.db import models


class Visit(models.Model):
    """One page visit, recorded by a task rather than by the request that saw it."""

    path = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True)


class Order(models.Model):
    """An order, saved with its receipt task in one transaction (shop.views.order)."""

    item = models.CharField(max_length=200)
    receipt_sent = models.BooleanField(default=False)
