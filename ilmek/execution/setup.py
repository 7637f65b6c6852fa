"""What a run is, fixed before it starts: its graph, thread, checkpointer and options.

:class:`RunOptions` is the one value for the keywords :func:`~ilmek.run`,
:func:`~ilmek.resume` and their streams take; :class:`RunSetup` is what
every collaborator of a run reads (never writes); :class:`EventStamper`
numbers a run's events.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .. import checks
from ..checkpoint import scratch_store
from ..checkpoint.base import Checkpointer
from ..errors import InvalidArgumentError, ResumeError
from ..events import Event
from ..graph import CompiledGraph
from ..types import new_random_id

if TYPE_CHECKING:
    from ..schema import StateSchema

__all__ = ["DEFAULT_RECURSION_LIMIT", "EventStamper", "RunOptions", "RunSetup"]

DEFAULT_RECURSION_LIMIT = 25

# As concurrent.futures picks, counted once (os.cpu_count() is a system call).
_DEFAULT_WORKERS = min(32, (os.cpu_count() or 1) + 4)


def _optional_mapping(value: Any) -> Mapping[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise InvalidArgumentError(f"meta must be a dict, got {type(value).__name__}")
    return value


@attrs.frozen(kw_only=True)
class RunOptions:
    """How to run: the same options for :func:`run`, :func:`resume` and their streams.

    Attributes:
        thread_id: The thread; required with a checkpointer.
        checkpointer: Where checkpoints live; without one the run keeps them
            in memory, and cannot pause (nobody could answer).
        checkpoint_id: Start from this checkpoint instead of the latest; if it
            is not the latest, the run forks a new branch.
        recursion_limit: The most supersteps this run may take.
        strict: Raise :class:`NondeterminismError` when a replayed task skips
            a journal key.
        meta: Free-form values nodes read as ``ctx.meta``.
        cancel: A ``threading.Event``; once set, the run stops at the next
            superstep boundary with status ``aborted``.
        max_workers: Threads for a superstep's tasks.
        expect_checkpoint_id: The checkpoint the caller saw (for a resume, the
            pause it answers: ``Result.checkpoint_id`` of the run that paused).
            The run goes ahead only while the thread's latest checkpoint is
            still that one, so an answer never reaches a pause its caller did
            not see; otherwise it is a :class:`ResumeError` (for a resume:
            that pause was already answered, or the thread moved on).
    """

    thread_id: str | None = None
    checkpointer: Checkpointer | None = None
    checkpoint_id: str | None = None
    recursion_limit: int = DEFAULT_RECURSION_LIMIT
    strict: bool = True
    meta: Mapping[str, Any] | None = attrs.field(default=None, converter=_optional_mapping)
    cancel: threading.Event | None = None
    max_workers: int | None = None
    expect_checkpoint_id: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.checkpointer is not None and not isinstance(self.checkpointer, Checkpointer):
            raise InvalidArgumentError(
                f"checkpointer must be a Checkpointer, got {type(self.checkpointer).__name__}"
            )
        if self.checkpointer is not None and self.thread_id is None:
            raise InvalidArgumentError("a checkpointer needs a thread_id: pass thread_id=...")
        if self.thread_id is not None:
            checks.thread_id(self.thread_id)
            if self.checkpointer is None:
                raise InvalidArgumentError(
                    f"thread_id={self.thread_id!r} was given without a checkpointer: nothing would keep "
                    "the thread, and a later run or resume could not find it. Pass checkpointer= "
                    "(InMemoryCheckpointer() keeps it in this process)"
                )
        checks.optional_checkpoint_id(self.checkpoint_id)
        checks.optional_checkpoint_id(self.expect_checkpoint_id, "expect_checkpoint_id")
        checks.count(self.recursion_limit, "recursion_limit", minimum=1)
        checks.count(self.max_workers, "max_workers", minimum=1, optional=True)
        if not isinstance(self.strict, bool):
            raise InvalidArgumentError(f"strict must be True or False, got {self.strict!r}")
        if self.cancel is not None and not (hasattr(self.cancel, "is_set") and hasattr(self.cancel, "wait")):
            raise InvalidArgumentError(f"cancel must be a threading.Event, got {type(self.cancel).__name__}")

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> RunOptions:
        """Options from keyword arguments, refusing unknown ones."""
        known = {field.name for field in attrs.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        return cls(**options)


@attrs.frozen(kw_only=True)
class RunSetup:
    """What a run is: read by every collaborator of the run, written by none.

    Attributes:
        graph: The compiled graph.
        schema: Its channels (the graph's schema).
        checkpointer: Where the thread lives (an in-memory one when the caller gave none).
        can_pause: Whether the caller gave a checkpointer (else nobody could answer a pause).
        thread_id: The thread.
        run_id: This run's id.
        options: The options as given.
        meta: What nodes read as ``ctx.meta``.
        cancel: The run's cancel event (the caller's, or one of its own).
        max_workers: Threads for a superstep's tasks.
    """

    graph: CompiledGraph
    schema: StateSchema
    checkpointer: Checkpointer
    can_pause: bool
    thread_id: str
    run_id: str
    options: RunOptions
    meta: Mapping[str, Any]
    cancel: threading.Event
    max_workers: int

    @property
    def limit(self) -> int:
        """The run's superstep budget (``recursion_limit``)."""
        return self.options.recursion_limit

    @property
    def strict(self) -> bool:
        return self.options.strict

    @classmethod
    def of(cls, graph: CompiledGraph, options: RunOptions, *, resuming: bool) -> RunSetup:
        """The setup of a run of ``graph`` with ``options``, refusing what cannot run at all."""
        if not isinstance(graph, CompiledGraph):
            raise InvalidArgumentError(
                f"expected a compiled graph, got {type(graph).__name__}; call .compile() on the builder"
            )
        checkpointer = options.checkpointer
        if checkpointer is None:
            if resuming:
                raise ResumeError(
                    "cannot resume without a checkpointer: the thread has no checkpoint to answer. "
                    "Pass the checkpointer= and thread_id= of the run that paused"
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
