"""What a child made by ``os.fork()`` must not inherit from its parent.

A fork copies the whole process (gunicorn ``--preload``, multiprocessing's
``fork`` start method and Celery's prefork pool all fork): the parent's
holds, the hold keeper's heap, connections ilmek opened, and locks that one
of the parent's other threads may have held at that instant, which no
thread of the child would ever release. ilmek counts forks: state that
records the :func:`generation` it was made in treats anything older as the
parent's (a hold from before the fork is never renewed or released by the
child), and :class:`ForkSafeLock` gives a child a fresh lock.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["ForkSafeLock", "generation", "on_fork_in_child"]

_generation = 0
_callbacks: list[Any] = []


def generation() -> int:
    """How many forks this process is from the one that imported ilmek (0 in that one)."""
    return _generation


def _forked() -> None:
    global _generation
    _generation += 1
    for callback in list(_callbacks):
        callback()


def on_fork_in_child(callback: Any) -> None:
    """Call ``callback()`` in every child right after a fork (for process-wide state, like the keeper)."""
    _callbacks.append(callback)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class ForkSafeLock:
    """A lock (``threading.Lock`` or ``RLock``) that a forked child gets fresh.

    A thread of the parent may hold the lock when the process forks; in the
    child that thread does not exist, so the copied lock would stay held for
    ever. The first use in a child replaces it.
    """

    __slots__ = ("_factory", "_generation", "_lock")

    def __init__(self, factory: Any = threading.Lock) -> None:
        self._factory = factory
        self._lock = factory()
        self._generation = _generation

    def _current(self) -> Any:
        if self._generation != _generation:
            self._lock = self._factory()
            self._generation = _generation
        return self._lock

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return bool(self._current().acquire(blocking, timeout))

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return bool(self._current().__enter__())

    def __exit__(self, *exc_info: Any) -> None:
        self._lock.__exit__(*exc_info)
