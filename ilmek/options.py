"""Run options, and the defaults a compiled graph binds: one value, merged in one place.

:class:`RunOptions` is what a call to :func:`~ilmek.run`, :func:`~ilmek.resume`
or one of their streams says; ``None`` in a field means "not said". A
compiled graph keeps what ``compile(checkpointer=..., **defaults)`` bound as
a :class:`RunOptions` too, and :meth:`RunOptions.resolve` lays a call over
it: the call wins field by field, then the graph's binding, then the
library's default.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from . import checks
from .checkpoint.base import Checkpointer
from .errors import InvalidArgumentError

__all__ = ["BINDABLE", "DEFAULT_RECURSION_LIMIT", "RunOptions"]

DEFAULT_RECURSION_LIMIT: Final = 25
"""The most supersteps a run takes when neither the call nor the graph says."""

BINDABLE: Final = ("checkpointer", "recursion_limit", "strict", "meta", "max_workers", "on_pause")
"""The run options ``compile()`` (and ``from_spec``, ``CompiledGraph.bind``) may bind."""

# Options that name one run, one thread or one checkpoint: bound to a graph
# they would apply to every run of it, which is never what was meant.
_PER_RUN: Final = {
    "thread_id": "a compiled graph runs many threads; pass thread_id= to each run, resume or host helper",
    "checkpoint_id": "it names a checkpoint of one thread; pass checkpoint_id= to the run that forks from it",
    "expect_checkpoint_id": "it names the pause one caller saw; pass expect_checkpoint_id= to that resume",
    "cancel": (
        "one threading.Event shared by every run would, once set, abort every later run of the "
        "graph; pass cancel= to each run"
    ),
}


def _optional_mapping(value: Any) -> Mapping[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise InvalidArgumentError(f"meta must be a dict, got {type(value).__name__}")
    return value


@attrs.frozen(kw_only=True)
class RunOptions:
    """How to run: the options of :func:`run`, :func:`resume` and their streams.

    A field left ``None`` is taken from the graph's binding (see
    ``GraphBuilder.compile``), else from the library's default.

    Attributes:
        thread_id: The thread; required with a checkpointer.
        checkpointer: Where checkpoints live; without one the run keeps them
            in memory, and cannot pause (nobody could answer).
        checkpoint_id: Start from this checkpoint instead of the latest; if it
            is not the latest, the run forks a new branch.
        recursion_limit: The most supersteps this run may take (default 25).
        strict: Raise :class:`NondeterminismError` when a replayed task skips
            a journal key (default ``True``).
        meta: Free-form values nodes read as ``ctx.meta``; a call's keys are
            laid over the graph's bound ones.
        cancel: A ``threading.Event``; once set, the run stops at the next
            superstep boundary with status ``aborted``.
        max_workers: Threads for a superstep's tasks.
        expect_checkpoint_id: The checkpoint the caller saw (for a resume, the
            pause it answers: ``Result.checkpoint_id`` of the run that paused).
            The run goes ahead only while the thread's latest checkpoint is
            still that one, so an answer never reaches a pause its caller did
            not see; otherwise it is a :class:`ResumeError` (for a resume:
            that pause was already answered, or the thread moved on).
        on_pause: Called with a :class:`~ilmek.notices.PauseNotice` for each
            pause a run opens, after its commit (bound with ``compile`` or
            ``bind``; see :mod:`ilmek.notices`).
    """

    thread_id: str | None = None
    checkpointer: Checkpointer | None = None
    checkpoint_id: str | None = None
    recursion_limit: int | None = None
    strict: bool | None = None
    meta: Mapping[str, Any] | None = attrs.field(default=None, converter=_optional_mapping)
    cancel: threading.Event | None = None
    max_workers: int | None = None
    expect_checkpoint_id: str | None = None
    on_pause: Callable[[Any], Any] | None = None

    def __attrs_post_init__(self) -> None:
        if self.checkpointer is not None and not isinstance(self.checkpointer, Checkpointer):
            raise InvalidArgumentError(
                f"checkpointer must be a Checkpointer, got {type(self.checkpointer).__name__}"
            )
        if self.thread_id is not None:
            checks.thread_id(self.thread_id)
        checks.optional_checkpoint_id(self.checkpoint_id)
        checks.optional_checkpoint_id(self.expect_checkpoint_id, "expect_checkpoint_id")
        checks.count(self.recursion_limit, "recursion_limit", minimum=1, optional=True)
        checks.count(self.max_workers, "max_workers", minimum=1, optional=True)
        if self.on_pause is not None and not callable(self.on_pause):
            raise InvalidArgumentError(f"on_pause must be a function, got {type(self.on_pause).__name__}")
        if self.strict is not None and not isinstance(self.strict, bool):
            raise InvalidArgumentError(f"strict must be True or False, got {self.strict!r}")
        if self.cancel is not None and not (hasattr(self.cancel, "is_set") and hasattr(self.cancel, "wait")):
            raise InvalidArgumentError(f"cancel must be a threading.Event, got {type(self.cancel).__name__}")

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> RunOptions:
        """Options from keyword arguments, refusing unknown ones.

        Raises:
            InvalidArgumentError: (also a ``TypeError``) an unknown name, or a bad value.
        """
        known = [field.name for field in attrs.fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise InvalidArgumentError(
                f"unexpected keyword argument {unknown[0]!r}; the run options are {', '.join(known)}"
            )
        return cls(**options)

    @classmethod
    def binding(cls, where: str, options: Mapping[str, Any]) -> RunOptions:
        """The run defaults ``where`` (a graph) binds, checked now rather than at its first run.

        Raises:
            InvalidArgumentError: an option that names one run (``thread_id``,
                ``checkpoint_id``, ``expect_checkpoint_id``, ``cancel``), an
                unknown name, or a bad value.
        """
        for name in options:
            if name in _PER_RUN:
                raise InvalidArgumentError(f"{where}: {name}= cannot be bound to a graph: {_PER_RUN[name]}")
            if name not in BINDABLE:
                raise InvalidArgumentError(
                    f"{where}: unexpected keyword argument {name!r}; a graph binds {', '.join(BINDABLE)}"
                )
        given = {name: value for name, value in options.items() if value is not None}
        if given.get("meta") is not None:
            # A read-only copy: the graph stays what it was when bound.
            given["meta"] = MappingProxyType(dict(_optional_mapping(given["meta"]) or {}))
        return cls(**given)

    def over(self, defaults: RunOptions) -> RunOptions:
        """These options, with what they leave unset (``None``) taken from ``defaults``."""
        merged: dict[str, Any] = {}
        taken = False
        for field in attrs.fields(RunOptions):
            mine = getattr(self, field.name)
            if mine is None:
                mine = getattr(defaults, field.name)
                taken = taken or mine is not None
            merged[field.name] = mine
        if self.meta is not None and defaults.meta is not None:
            merged["meta"] = MappingProxyType({**defaults.meta, **self.meta})
            taken = True
        # Nothing bound that the call left unset (an unbound graph): these options, already checked.
        return RunOptions(**merged) if taken else self

    def resolve(self, defaults: RunOptions, *, graph_name: str) -> RunOptions:
        """The call's options over the graph's ``defaults``, checked as a whole.

        What both leave unset stays ``None``: the library's default (see
        :data:`DEFAULT_RECURSION_LIMIT`).

        Raises:
            InvalidArgumentError: a checkpointer (given or bound) without a
                ``thread_id``, or a ``thread_id`` with no checkpointer to keep it.
        """
        merged = self.over(defaults)
        if merged.checkpointer is not None and merged.thread_id is None:
            if self.checkpointer is None:
                raise InvalidArgumentError(
                    f"graph {graph_name!r} is bound to a checkpointer (compile(checkpointer=...)), so a "
                    "run needs to know its thread: pass thread_id=..."
                )
            raise InvalidArgumentError("a checkpointer needs a thread_id: pass thread_id=...")
        if merged.thread_id is not None and merged.checkpointer is None:
            raise InvalidArgumentError(
                f"thread_id={merged.thread_id!r} was given without a checkpointer: nothing would keep "
                "the thread, and a later run or resume could not find it. Pass checkpointer= "
                "(InMemoryCheckpointer() keeps it in this process), or bind one with "
                "compile(checkpointer=...)"
            )
        return merged
