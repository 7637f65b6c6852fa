"""The Django example as a WSGI application, for gunicorn (`-c examples/gunicorn_conf.py` drains on SIGTERM).

Creates ilmek's tables and the shop's on load, as ``python -m examples.django_app`` does.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()

from . import views  # noqa: E402 -- Django is set up by get_wsgi_application

views.create_tables()
