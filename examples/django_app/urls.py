"""The checkout API's routes."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("checkout", views.start_checkout),
    path("checkout/<str:thread_id>/approve", views.approve_checkout),
    path("checkout/<str:thread_id>", views.show_checkout),
]
