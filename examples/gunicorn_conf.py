"""A gunicorn configuration that drains ilmek's runs on every deploy (for the Flask or the Django example).

gunicorn sends each worker SIGTERM when it stops or reloads it, then kills
the worker once ``graceful_timeout`` has passed. A request running a long
graph would be killed mid-superstep, its thread held until the hold's lease
lapses. With these hooks the worker calls :func:`ilmek.drain` first: each
run in flight finishes its superstep, commits, ends ``aborted`` with the
reason ``"draining"`` and gives its thread back at once; ``ilmek worker
--recover-after ...`` (or ``ilmek recover``) continues it in another
process without repeating a step. Use it with::

    .venv/bin/gunicorn -c examples/gunicorn_conf.py 'examples.flask_app:app_from_environment()'
    DATABASE_URL=postgresql://localhost/shop .venv/bin/gunicorn -c examples/gunicorn_conf.py \\
        examples.django_app.wsgi

(any ``-c`` file may hold these two hooks; gunicorn must be installed).
"""

from __future__ import annotations

import signal
from typing import Any

import ilmek

graceful_timeout = 60  # longer than your slowest superstep: the drain waits for it to commit


def post_worker_init(worker: Any) -> None:
    """In each worker: SIGTERM drains ilmek's runs, then goes on to gunicorn's own graceful stop."""
    graceful_stop = signal.getsignal(signal.SIGTERM)

    def drain_then_stop(signum: int, frame: Any) -> None:
        ilmek.drain()
        if callable(graceful_stop):
            graceful_stop(signum, frame)

    signal.signal(signal.SIGTERM, drain_then_stop)


def worker_int(worker: Any) -> None:
    """SIGINT or SIGQUIT (Ctrl-C in a terminal): drain too."""
    ilmek.drain()
