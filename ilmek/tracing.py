"""OpenTelemetry spans for runs, supersteps, tasks and steps, when the OpenTelemetry API is installed.

``pip install ilmek[otel]`` installs the API (``opentelemetry-api``); spans
are recorded by whatever SDK the application configures. Without the API
every function here does nothing: ilmek never imports it, and a run pays
one check, as it starts. With the API but no tracer provider set (its
default), ilmek makes no span either: whether a run is traced is asked once
per run, as it starts (a provider set later counts from the next run), and
an untraced run's supersteps, tasks and steps pay nothing for tracing.

The spans, each a child of the one before:

``ilmek.run``
    One run (``run``, ``resume``, a stream), a child of the span current
    where the run started (a web request's, say). Attributes
    ``ilmek.graph``, ``ilmek.thread_id``, ``ilmek.run_id``, ``ilmek.mode``
    (``run`` or ``resume``) and, at its end, ``ilmek.status`` and
    ``ilmek.checkpoint_id``. Current while the run works on its reader's
    thread (taking the hold, committing the input, recording answers,
    giving the hold back), so every statement ilmek sends there is its
    child or a child of a span below it.
``ilmek.superstep``
    One superstep: ``ilmek.step`` (its number), ``ilmek.checkpoint_id``
    (the checkpoint it starts from) and ``ilmek.tasks``.
``ilmek.task``
    One task's attempts: ``ilmek.node``, ``ilmek.task_id``,
    ``ilmek.attempts``. Current on the thread that runs the node's body,
    so spans the node's own code makes are its children.
``ilmek.step``
    One step whose function runs (a replayed step runs nothing and has no
    span): ``ilmek.step_key`` and ``ilmek.node``. Current while the
    function runs.

A span ends with status ERROR and the exception recorded when a node
fails, or the run ends in ``error`` or raises. Spans are never made current
across a stream's ``yield``: the reader's code between events keeps its own
context.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping
from typing import Any, TypeVar

__all__ = ["child", "current", "end", "record_error", "set_attributes", "start", "within"]

_Item = TypeVar("_Item")

_UNRESOLVED: Any = object()
_tracer: Any = _UNRESOLVED
_trace: Any = None  # the opentelemetry.trace module, once imported


def _resolve() -> Any:
    """The OpenTelemetry tracer for ilmek, or None without the API (looked up once)."""
    global _tracer, _trace
    try:
        from opentelemetry import trace
    except ImportError:
        _tracer = None
        return None
    from . import __version__

    _trace = trace
    _tracer = trace.get_tracer("ilmek", __version__)
    return _tracer


def _recording() -> bool:
    """Whether the application set a tracer provider that records (not the API's default or no-op one).

    Asked at each span: a provider may be set after ilmek's first run. With
    none set, making even non-recording spans would cost a run tens of
    microseconds for nothing.
    """
    provider = _trace.get_tracer_provider()
    return not isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


def start(name: str, parent: Any | None, attributes: Mapping[str, Any]) -> Any | None:
    """Start span ``name`` as a child of ``parent`` (a span; None: the context current here).

    Returns:
        The span, or None when the OpenTelemetry API is not installed.
    """
    tracer = _tracer if _tracer is not _UNRESOLVED else _resolve()
    if tracer is None or not _recording():
        return None
    context = None if parent is None else _trace.set_span_in_context(parent)
    return tracer.start_span(name, context=context, attributes=dict(attributes))


def child(name: str, parent: Any | None, attributes: Mapping[str, Any]) -> Any | None:
    """Start span ``name`` as a child of ilmek's own span ``parent``; None while ``parent`` is None.

    For the parts of a run (supersteps, tasks, steps): a run whose span was
    not made is not traced, and its parts ask nothing.
    """
    if parent is None:
        return None
    return _tracer.start_span(name, context=_trace.set_span_in_context(parent), attributes=dict(attributes))


def set_attributes(span: Any | None, attributes: Mapping[str, Any]) -> None:
    """Add ``attributes`` to ``span`` (None: nothing to do)."""
    if span is not None:
        span.set_attributes(dict(attributes))


def record_error(span: Any | None, error: BaseException, description: str | None = None) -> None:
    """Mark ``span`` failed by ``error``: status ERROR, and the exception recorded."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, description or f"{type(error).__name__}: {error}"))


def end(span: Any | None, error: BaseException | None = None) -> None:
    """End ``span``; with ``error``, marked failed first."""
    if span is None:
        return
    if error is not None:
        record_error(span, error)
    span.end()


_NOTHING_CURRENT: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
"""What :func:`current` gives for no span: made once (it wraps every superstep's commit)."""


def current(span: Any | None) -> contextlib.AbstractContextManager[Any]:
    """Make ``span`` the current span on this thread for the block (never across a ``yield``)."""
    if span is None:
        return _NOTHING_CURRENT
    used: contextlib.AbstractContextManager[Any] = _trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )
    return used


def within(span: Any | None, work: Generator[_Item, None, None]) -> Generator[_Item, None, None]:
    """``work``'s items, with ``span`` current on this thread while ``work`` runs, never across a yield.

    A run is a generator driven by its reader: its own work between two
    events (taking the hold, committing the input, recording answers,
    giving the hold back) runs inside the reader's ``next()``. Made current
    for each of those stretches, ``span`` is the parent of every statement
    sent meanwhile, while the reader's code between events keeps its own
    context. Closing or throwing into the outer generator reaches ``work``
    with ``span`` current too. With no span (tracing off) ``work`` is
    returned as it is: nothing is paid per event.
    """
    if span is None:
        return work
    return _within(span, work)


def _within(span: Any, work: Generator[_Item, None, None]) -> Generator[_Item, None, None]:
    thrown: BaseException | None = None
    while True:
        with current(span):
            try:
                item = next(work) if thrown is None else work.throw(thrown)
            except StopIteration:
                return
        thrown = None
        try:
            yield item
        except GeneratorExit:
            with current(span):
                work.close()
            raise
        except BaseException as error:  # thrown in by the reader: ``work`` decides
            thrown = error
