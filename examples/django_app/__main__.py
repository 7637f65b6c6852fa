"""Run the Django example from the root of a clone, with the project's interpreter (``.venv``).

After ``bash scripts/demo`` has made ``.venv``, one line installs Django and
psycopg2 into it::

    .venv/bin/pip install -e '.[postgres]' django

The example creates ilmek's tables and the shop's, then runs a Django
management command: ``runserver`` when none is given::

    DATABASE_URL=postgresql://localhost/shop .venv/bin/python -m examples.django_app
    DATABASE_URL=postgresql://localhost/shop .venv/bin/python -m examples.django_app runserver 8001
    DATABASE_URL=postgresql://localhost/shop .venv/bin/python -m examples.django_app check

Then::

    curl -X POST localhost:8000/checkout -d '{"thread_id": "order-1", "cart": ["coffee", "mug"]}'
    curl -X POST localhost:8000/checkout/order-1/approve -d '{"answer": "yes"}'

In production serve ``examples.django_app.wsgi`` with gunicorn and
``examples/gunicorn_conf.py``: its SIGTERM hook calls ``ilmek.drain()``, so a
deploy stops each run at its next superstep boundary and gives its thread
back for ``ilmek worker --recover-after`` to continue.

With ``CONSOLE_PASSWORD=...`` in the environment, ilmek's web console is at
http://localhost:8000/console/ (HTTP Basic, any user name, that password).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Set Django up on this project's settings, create the tables, run the command (default: serve)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", f"{__package__}.settings")
    import django
    from django.core.management import execute_from_command_line

    django.setup()
    from . import views

    views.create_tables()
    execute_from_command_line([sys.argv[0], *(sys.argv[1:] or ["runserver"])])


if __name__ == "__main__":
    main()
