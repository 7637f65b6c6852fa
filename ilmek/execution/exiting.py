"""Streams still open when the interpreter exits are closed before its worker threads are joined.

A script that stops reading a stream without closing it leaves the run
suspended, its hold taken. If a step's function was running, the node's
worker waits for the stream's driver to record what the step returned; at
exit, ``concurrent.futures`` joins its workers before anything collects the
forgotten stream, so that wait would never end and the process would never
exit. Once the first worker pool exists, ilmek closes every stream still
open just before the workers are joined, exactly as ``stream.close()``
would: running steps are waited for (up to a lease) and recorded, then the
thread is given back.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Generator
from typing import Any

from .. import forks
from ..logs import logger

__all__ = ["close_open_streams_before_workers_join", "watch"]

_open: weakref.WeakSet[Generator[Any, None, None]] = weakref.WeakSet()
_registered = False
_registering = threading.Lock()


def watch(events: Generator[Any, None, None]) -> Generator[Any, None, None]:
    """Remember a run's event stream, to be closed at exit if it is still open then."""
    _open.add(events)
    return events


def close_open_streams_before_workers_join() -> None:
    """Arrange, once, that open streams are closed at exit before worker threads are joined.

    Called after ``concurrent.futures`` is imported: exit hooks of
    ``threading`` run last-registered first, so this one runs before the
    one that joins the pool's workers.
    """
    global _registered
    with _registering:
        if _registered:
            return
        _registered = True
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - every supported CPython has it
        return
    try:
        register(_close_open_streams)
    except RuntimeError:  # the interpreter is already shutting down
        return


def _close_open_streams() -> None:
    import inspect  # only at exit, and only once a pool existed

    for events in list(_open):
        # Only a stream suspended mid-run: one another thread is reading right now is that thread's to end.
        if inspect.getgeneratorstate(events) != inspect.GEN_SUSPENDED:
            continue
        try:
            events.close()
        except Exception as error:  # exiting: say so, and let the other streams close
            logger("ilmek.run").warning("a stream left open at exit could not be closed: %s", error)


def _forget_the_parents_streams() -> None:
    # A forked child's copies of the parent's streams have no workers and no hold of its own.
    _open.clear()


forks.on_fork_in_child(_forget_the_parents_streams)
