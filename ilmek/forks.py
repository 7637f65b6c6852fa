"""What a child made by ``os.fork()`` must not inherit from its parent.

A fork copies the whole process (gunicorn ``--preload``, multiprocessing's
``fork`` start method and Celery's prefork pool all fork): the parent's
holds, the hold keeper's heap, connections ilmek opened, and locks that one
of the parent's other threads may have held at that instant, which no
thread of the child would ever release. ilmek counts forks: state that
records the :func:`generation` it was made in treats anything older as the
parent's (a hold from before the fork is never renewed or released by the
child), and :class:`ForkSafeLock` gives a child a fresh lock.

A connection's socket is copied too. While one of ilmek's transactions is
open on it, the server keeps that transaction's locks (the thread's hold
row) until the socket closes, and a copy kept open in a live child would
keep them for as long as the child lives, after the parent dies mid-way.
:func:`in_transaction` names those sockets; a child points its copies at
``/dev/null``, so the parent's death closes the connection as it should.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ForkSafeLock", "generation", "in_transaction", "on_fork_in_child", "out_of_transaction"]

_generation = 0
_callbacks: list[Any] = []
#: The sockets of connections inside one of ilmek's transactions, by the
#: connection's id: a function that reads the socket's descriptor.
_busy_sockets: dict[int, Callable[[], int | None]] = {}


def generation() -> int:
    """How many forks this process is from the one that imported ilmek (0 in that one)."""
    return _generation


def in_transaction(connection: object, socket: Callable[[], int | None]) -> None:
    """Say that one of ilmek's transactions is open on ``connection``, whose socket ``socket()`` reads."""
    _busy_sockets[id(connection)] = socket


def out_of_transaction(connection: object) -> None:
    """Say that the transaction :func:`in_transaction` named has ended."""
    _busy_sockets.pop(id(connection), None)


def _cut_inherited_sockets() -> None:
    """In a child: replace each copied socket of a connection in a transaction by ``/dev/null``.

    Nothing is sent on it (closing the driver's connection would end the
    parent's session); the child's copy of the connection then reads an end
    of file and fails like a lost connection, if the child ever uses it.
    """
    sockets = list(_busy_sockets.values())
    _busy_sockets.clear()
    if not sockets:
        return
    nothing = os.open(os.devnull, os.O_RDWR)
    try:
        for socket in sockets:
            with contextlib.suppress(Exception):
                descriptor = socket()
                if descriptor is not None and stat.S_ISSOCK(os.fstat(descriptor).st_mode):
                    os.dup2(nothing, descriptor)
    finally:
        os.close(nothing)


def _forked() -> None:
    global _generation
    _generation += 1
    _cut_inherited_sockets()
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
