"""Settings of the Django example: one Postgres database from ``DATABASE_URL``, and nothing else.

``ATOMIC_REQUESTS`` is on unless ``ATOMIC_REQUESTS=0``: every view then runs
in one transaction, ilmek writes its checkpoints in a savepoint inside it,
and Django commits them together with the rest of the request (or rolls them
back with it).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


def database_from_url(url: str, *, atomic_requests: bool = True) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for ``postgresql://user:password@host:port/name?option=value``.

    A host that is a socket folder is written percent-encoded
    (``postgresql://%2Fvar%2Frun%2Fpostgresql/shop``); query parameters
    become libpq ``OPTIONS``.

    Raises:
        ValueError: the URL is not a ``postgresql://`` URL or names no database.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError("DATABASE_URL must be a postgresql:// URL")
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ValueError("DATABASE_URL must name a database: postgresql://host/name")
    # Not parts.hostname: it lowercases, and a socket folder's path is case-sensitive.
    host = parts.netloc.rpartition("@")[2]
    if parts.port is not None:
        host = host.rpartition(":")[0]
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(host),
        "PORT": str(parts.port or ""),
        "OPTIONS": dict(parse_qsl(parts.query)),
        "ATOMIC_REQUESTS": atomic_requests,
        # Persistent connections, as in production: a connection must come out
        # of every request clean (no open transaction, no lock held).
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "the-example-has-no-secrets")
# ilmek's web console at /console, behind HTTP Basic with this password; no console without one.
CONSOLE_PASSWORD = os.environ.get("CONSOLE_PASSWORD", "")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
# Whatever package this project is imported as.
ROOT_URLCONF = __name__.rpartition(".")[0] + ".urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
USE_TZ = True
DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", "postgresql://localhost/checkout"),
        atomic_requests=os.environ.get("ATOMIC_REQUESTS", "1") != "0",
    )
}
