from __future__ import annotations

from django.db import models


class Visit(models.Model):
    """One page visit, recorded by a task rather than by the request that saw it."""

    path = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True)
