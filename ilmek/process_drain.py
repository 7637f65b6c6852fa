"""The drain of this process: :func:`drain` asks every run of the process to stop and give its thread back.

A host process (a gunicorn or Django worker, ``ilmek worker``) is sent
SIGTERM on every deploy. Its signal handler (or gunicorn's ``worker_int``
hook) calls :func:`drain`; from then on every run of the process stops at
its next superstep boundary: the superstep in flight finishes and commits,
the run ends ``aborted`` with the reason ``"draining"`` and gives its
thread back, its last checkpoint standing, so :func:`~ilmek.recover` (or
``ilmek worker --recover-after``) in another process continues it without
repeating a step. A run asked to start afterwards is refused with
:class:`~ilmek.DrainingError` before anything is written, as an executor
refuses work after its shutdown.
"""

from __future__ import annotations

import threading

from .errors import DrainingError

__all__ = ["DRAIN_REASON", "drain", "draining", "refuse_if_draining", "undrain"]

DRAIN_REASON = "draining"
"""The reason a run stopped by the drain records on its thread (``ThreadInfo.cancelled.reason``)."""

_DRAINING = threading.Event()


def drain() -> None:
    """Stop every run of this process at its next superstep boundary and start no new one.

    Safe to call from a signal handler and from any thread; calling it
    again does nothing more. Runs in flight end ``aborted`` with the reason
    ``"draining"`` once their superstep in flight has committed, and give
    their thread back; a later :func:`~ilmek.run`, :func:`~ilmek.resume`,
    :func:`~ilmek.tick` or :func:`~ilmek.recover` of this process is refused
    with :class:`~ilmek.DrainingError` (``tick`` and ``recover`` simply
    stop sweeping) until :func:`undrain`.
    """
    _DRAINING.set()


def draining() -> bool:
    """Whether :func:`drain` was called in this process (and not undone by :func:`undrain`)."""
    return _DRAINING.is_set()


def undrain() -> None:
    """Let this process start runs again after :func:`drain` (a test, or a deploy called off)."""
    _DRAINING.clear()


def refuse_if_draining(thread_id: str) -> None:
    """Raise :class:`~ilmek.DrainingError` for a run of ``thread_id`` asked to start while draining."""
    if _DRAINING.is_set():
        raise DrainingError(
            f"this process is draining (ilmek.drain() was called, usually by its SIGTERM handler): "
            f"the run of thread {thread_id!r} was not started and nothing was written; start it in "
            "another process, or call ilmek.undrain() first",
            thread_id=thread_id,
        )
