"""What a run tells the outside world about itself: one log record as it starts, one as it ends, and its span.

On the ``ilmek.run`` logger: DEBUG when a run starts; INFO when it ends
``done``, ``interrupted`` or ``aborted``, when its reader closes its stream
early, or when it raises (the caller has the exception); WARNING, with the
node's exception and traceback, when it ends in ``error``: a failed node is
never silent, whether or not the caller calls ``raise_for_status()``. Each
record carries ``thread_id`` and ``run_id`` as attributes of the record.
Records below WARNING are skipped while nothing has imported :mod:`logging`
(no handler could show them), so a script that never logs never imports it.
The span is ``ilmek.run`` (see :mod:`ilmek.tracing`).
"""

from __future__ import annotations

import time
from typing import Any

from .. import tracing
from ..events import RunEnd
from ..logs import logger, logger_if_configurable
from .setup import RunSetup

__all__ = ["RunTelemetry"]


class RunTelemetry:
    """One run's log records and span, from its start to however it ends (reported once)."""

    def __init__(self, setup: RunSetup, mode: str) -> None:
        self._setup = setup
        self._started = time.monotonic()
        self._over = False
        self._extra = {"thread_id": setup.thread_id, "run_id": setup.run_id}
        self.span: Any | None = tracing.start(
            "ilmek.run",
            None,
            {
                "ilmek.graph": setup.graph.name,
                "ilmek.thread_id": setup.thread_id,
                "ilmek.run_id": setup.run_id,
                "ilmek.mode": mode,
            },
        )
        log = logger_if_configurable("ilmek.run")
        if log is not None:
            log.debug(
                "run %s of graph %r on thread %r started (%s)",
                setup.run_id,
                setup.graph.name,
                setup.thread_id,
                mode,
                extra=self._extra,
            )

    def _info(self, message: str, *arguments: Any) -> None:
        log = logger_if_configurable("ilmek.run")
        if log is not None:
            log.info(message, *arguments, extra=self._extra)

    def _milliseconds(self) -> float:
        return (time.monotonic() - self._started) * 1000.0

    def ended(self, end: RunEnd) -> None:
        """The run reached its end: one INFO record, or one WARNING naming the failed node."""
        if self._over:
            return
        self._over = True
        setup = self._setup
        tracing.set_attributes(
            self.span, {"ilmek.status": end.status, "ilmek.checkpoint_id": end.checkpoint_id or ""}
        )
        if end.status == "error" and end.errors:
            node, error = end.errors[0]
            logger("ilmek.run").warning(
                "run %s on thread %r failed in node %r after %.1f ms: %s: %s (checkpoint %s)",
                setup.run_id,
                setup.thread_id,
                node,
                self._milliseconds(),
                type(error).__name__,
                error,
                end.checkpoint_id,
                exc_info=(type(error), error, error.__traceback__),
                extra={**self._extra, "node": node},
            )
            tracing.record_error(self.span, error, f"node {node!r} failed: {type(error).__name__}: {error}")
        else:
            detail = f" ({end.abort_reason})" if end.status == "aborted" and end.abort_reason else ""
            self._info(
                "run %s on thread %r ended %s%s after %.1f ms (checkpoint %s)",
                setup.run_id,
                setup.thread_id,
                end.status,
                detail,
                self._milliseconds(),
                end.checkpoint_id,
            )
        tracing.end(self.span)

    def closed(self) -> None:
        """The reader closed the stream before the run's end."""
        if self._over:
            return
        self._over = True
        self._info(
            "run %s on thread %r was stopped by its reader (stream closed) after %.1f ms",
            self._setup.run_id,
            self._setup.thread_id,
            self._milliseconds(),
        )
        tracing.set_attributes(self.span, {"ilmek.status": "closed"})
        tracing.end(self.span)

    def raised(self, error: BaseException) -> None:
        """The run raises ``error`` to its caller (a storage failure, a busy thread, a bad resume...)."""
        if self._over:
            return
        self._over = True
        self._info(
            "run %s on thread %r raised %s after %.1f ms: %s",
            self._setup.run_id,
            self._setup.thread_id,
            type(error).__name__,
            self._milliseconds(),
            error,
        )
        tracing.set_attributes(self.span, {"ilmek.status": "raised"})
        tracing.end(self.span, error)
