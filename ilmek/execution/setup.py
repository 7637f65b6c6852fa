"""What a run is, fixed before it starts: its graph, thread, checkpointer and options.

:class:`RunSetup` is what every collaborator of a run reads (never writes):
the call's :class:`~ilmek.options.RunOptions` laid over the graph's bound
defaults and the library's, resolved once, here. :class:`EventStamper`
numbers a run's events. ``RunOptions`` is re-exported from here, where it
used to live.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..checkpoint import scratch_store
from ..checkpoint.base import Checkpointer
from ..errors import InvalidArgumentError, ResumeError
from ..events import Event
from ..graph import CompiledGraph
from ..options import DEFAULT_RECURSION_LIMIT, RunOptions
from ..types import new_random_id

if TYPE_CHECKING:
    from ..schema import StateSchema

__all__ = ["DEFAULT_RECURSION_LIMIT", "EventStamper", "RunOptions", "RunSetup"]

# As concurrent.futures picks, counted once (os.cpu_count() is a system call).
_DEFAULT_WORKERS = min(32, (os.cpu_count() or 1) + 4)


@attrs.frozen(kw_only=True)
class RunSetup:
    """What a run is: read by every collaborator of the run, written by none.

    Attributes:
        graph: The compiled graph.
        schema: Its channels (the graph's schema).
        checkpointer: Where the thread lives (an in-memory one when the caller gave none).
        can_pause: Whether the run has a checkpointer of the caller's, given or bound (else
            nobody could answer a pause).
        thread_id: The thread.
        run_id: This run's id.
        options: The call's options over the graph's bound defaults.
        limit: The run's superstep budget (``recursion_limit``).
        strict: Whether a replayed task that skips a journal key is an error.
        meta: What nodes read as ``ctx.meta``.
        cancel: The run's cancel event (the caller's, or one of its own).
        max_workers: Threads for a superstep's tasks.
    """

    graph: CompiledGraph[Any]
    schema: StateSchema
    checkpointer: Checkpointer
    can_pause: bool
    thread_id: str
    run_id: str
    options: RunOptions
    limit: int
    strict: bool
    meta: Mapping[str, Any]
    cancel: threading.Event
    max_workers: int

    @classmethod
    def of(cls, graph: CompiledGraph[Any], call: RunOptions, *, resuming: bool) -> RunSetup:
        """The setup of a run of ``graph`` as the ``call`` asks, refusing what cannot run at all.

        This is the one place a call's options meet the graph's bound
        defaults (:meth:`RunOptions.resolve`) and the library's: the call
        wins, then the graph, then the library.
        """
        if not isinstance(graph, CompiledGraph):
            raise InvalidArgumentError(
                f"expected a compiled graph, got {type(graph).__name__}; call .compile() on the builder"
            )
        options = call.resolve(graph.defaults, graph_name=graph.name)
        checkpointer = options.checkpointer
        if checkpointer is None:
            if resuming:
                raise ResumeError(
                    "cannot resume without a checkpointer: the thread has no checkpoint to answer. "
                    "Pass the checkpointer= and thread_id= of the run that paused (or bind the "
                    "checkpointer with compile(checkpointer=...))"
                )
            checkpointer = scratch_store()
        return cls(
            graph=graph,
            schema=graph.schema,
            checkpointer=checkpointer,
            can_pause=options.checkpointer is not None,
            thread_id=options.thread_id if options.thread_id is not None else new_random_id(),
            run_id=new_random_id(),
            options=options,
            limit=DEFAULT_RECURSION_LIMIT if options.recursion_limit is None else options.recursion_limit,
            strict=True if options.strict is None else options.strict,
            meta=dict(options.meta or {}),
            cancel=options.cancel if options.cancel is not None else threading.Event(),
            max_workers=options.max_workers or _DEFAULT_WORKERS,
        )


class EventStamper:
    """Makes a run's events, numbering them 1, 2, 3... with no gaps."""

    __slots__ = ("_run_id", "_seq", "_thread_id")

    def __init__(self, run_id: str, thread_id: str) -> None:
        self._run_id = run_id
        self._thread_id = thread_id
        self._seq = 0

    def __call__(self, cls: type[Event], **fields: Any) -> Event:
        self._seq += 1
        return cls(run_id=self._run_id, thread_id=self._thread_id, seq=self._seq, **fields)

    def restamp(self, event: Event, ns: tuple[str, ...]) -> Event:
        """A subgraph's ``event`` as this run's next one, under ``ns`` (the child's path in front)."""
        self._seq += 1
        return attrs.evolve(
            event, run_id=self._run_id, thread_id=self._thread_id, seq=self._seq, ns=(*ns, *event.ns)
        )
