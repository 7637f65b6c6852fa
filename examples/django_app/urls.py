"""The checkout API's routes, and ilmek's web console under ``/console``."""

from __future__ import annotations

from django.urls import path, re_path

from . import views

urlpatterns = [
    path("checkout", views.start_checkout),
    path("checkout/<str:thread_id>/approve", views.approve_checkout),
    path("checkout/<str:thread_id>", views.show_checkout),
    # The console builds its links from the mount point this pattern captures before `path`.
    re_path(r"^console(?P<path>/.*)?$", views.console_view),
]
