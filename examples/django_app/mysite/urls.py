from __future__ import annotations

from django.urls import path
from shop import views

urlpatterns = [
    path("visit", views.visit),
    path("visits", views.visits),
    path("order", views.order),
    path("orders", views.orders),
    path("tasks/<str:task_id>", views.task_result),
]
