"""The web console: threads waiting for a person, each thread's history, and the buttons to act.

``ilmek.web.app(checkpointer, graphs=None, allow_actions=False)`` is a WSGI
application (standard library only); ``ilmek web`` serves it
(:func:`ilmek.web.serve.serve`); :func:`django_view` mounts it in Django.
"""

from __future__ import annotations

from .app import Console, app
from .django import django_view

__all__ = ["Console", "app", "django_view"]
