"""What the thread that calls ``run()`` has open, as far as storage is concerned.

Asked by checkpointers (never by the engine) to decide whether a run's tasks
may share the caller's thread. Imports nothing (Django is looked up in
``sys.modules``, only if the caller's program imported it), so a run that
never needs it pays nothing.
"""

from __future__ import annotations

import sys

__all__ = ["caller_in_atomic_block"]


def caller_in_atomic_block() -> bool:
    """Whether the calling thread has a Django ``atomic`` block open (Django imported or not)."""
    django_db = sys.modules.get("django.db")
    if django_db is None:
        return False
    try:
        return any(
            connection.in_atomic_block for connection in django_db.connections.all(initialized_only=True)
        )
    except Exception as error:
        # Imported but never configured: no connection, so no atomic block.
        # Any other failure (an older Django): do not guess.
        exceptions = sys.modules.get("django.core.exceptions")
        return exceptions is None or not isinstance(error, exceptions.ImproperlyConfigured)
