"""The events a run yields, and their projection into stream modes.

Every event carries ``type``, ``run_id``, ``thread_id``, ``seq`` (1, 2, 3...
within a run, without gaps) and ``ns`` (``()`` at the root). A run emits, in
order: ``run_start``; per superstep ``step_start``, ``node_start`` for each
task, then ``custom`` / ``node_retry`` live while tasks run and ``node_end`` /
``node_error`` as each finishes, then ``state`` and ``checkpoint`` once it
commits; ``interrupt`` when it pauses; ``run_end`` last.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from .types import Pending, RunStatus

__all__ = [
    "CheckpointEvent",
    "CustomEvent",
    "Event",
    "EventBase",
    "InterruptEvent",
    "NodeEnd",
    "NodeError",
    "NodeRetry",
    "NodeStart",
    "RunEnd",
    "RunStart",
    "StateEvent",
    "StepStart",
    "StreamPart",
    "stream_modes",
]


@attrs.frozen(kw_only=True)
class EventBase:
    """The envelope every event shares; :data:`Event` is the union of its kinds.

    Each kind narrows ``type`` to one literal, so ``if event.type == "custom":``
    tells a type checker the event is a :class:`CustomEvent`.
    """

    type: str = attrs.field(default="event", init=False)
    run_id: str
    thread_id: str
    seq: int
    ns: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class RunStart(EventBase):
    """The run began."""

    type: Literal["run_start"] = attrs.field(default="run_start", init=False)


@attrs.frozen(kw_only=True)
class StepStart(EventBase):
    """A superstep began; ``tasks`` are its task keys in task order."""

    type: Literal["step_start"] = attrs.field(default="step_start", init=False)
    step: int
    tasks: tuple[str, ...]


@attrs.frozen(kw_only=True)
class NodeStart(EventBase):
    """A task began."""

    type: Literal["node_start"] = attrs.field(default="node_start", init=False)
    node: str
    task_id: str


@attrs.frozen(kw_only=True)
class CustomEvent(EventBase):
    """A node called ``ctx.emit`` (or ``ctx.emit_token``)."""

    type: Literal["custom"] = attrs.field(default="custom", init=False)
    payload: Any
    node: str
    task_id: str


@attrs.frozen(kw_only=True)
class NodeRetry(EventBase):
    """A task's attempt number ``attempt`` failed with ``error``; it runs again."""

    type: Literal["node_retry"] = attrs.field(default="node_retry", init=False)
    node: str
    attempt: int
    error: BaseException
    task_id: str


@attrs.frozen(kw_only=True)
class NodeEnd(EventBase):
    """A task returned ``update`` (its channel writes)."""

    type: Literal["node_end"] = attrs.field(default="node_end", init=False)
    node: str
    update: Mapping[str, Any]
    task_id: str


@attrs.frozen(kw_only=True)
class NodeError(EventBase):
    """A task failed for good with ``error``."""

    type: Literal["node_error"] = attrs.field(default="node_error", init=False)
    node: str
    error: BaseException
    task_id: str


@attrs.frozen(kw_only=True)
class StateEvent(EventBase):
    """The channel values after a superstep's writes were folded in."""

    type: Literal["state"] = attrs.field(default="state", init=False)
    channels: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class CheckpointEvent(EventBase):
    """A checkpoint was committed."""

    type: Literal["checkpoint"] = attrs.field(default="checkpoint", init=False)
    id: str


@attrs.frozen(kw_only=True)
class InterruptEvent(EventBase):
    """The run paused; ``pending`` are the open pauses."""

    type: Literal["interrupt"] = attrs.field(default="interrupt", init=False)
    pending: tuple[Pending, ...]


@attrs.frozen(kw_only=True)
class RunEnd(EventBase):
    """The run ended with ``status`` ``done``, ``interrupted``, ``error`` or ``aborted``."""

    type: Literal["run_end"] = attrs.field(default="run_end", init=False)
    status: RunStatus
    state: Any = None
    pending: tuple[Pending, ...] = ()
    errors: tuple[tuple[str, BaseException], ...] = ()
    abort_reason: str | None = None
    checkpoint_id: str | None = None


Event: TypeAlias = (
    RunStart
    | StepStart
    | NodeStart
    | CustomEvent
    | NodeRetry
    | NodeEnd
    | NodeError
    | StateEvent
    | CheckpointEvent
    | InterruptEvent
    | RunEnd
)
"""Any event a run yields: one of the kinds above, told apart by ``type`` (or ``isinstance``)."""


@attrs.frozen(kw_only=True)
class StreamPart:
    """One projected piece of a stream, keeping its event's ``seq`` and ``ns``."""

    mode: str
    data: Any
    seq: int
    ns: tuple[str, ...] = ()


MODES = ("values", "updates", "custom", "messages", "debug")


def _is_token(payload: Any) -> bool:
    # MODEL §10.2: a token is {"type": "token", "text": str, "meta"?}; a payload
    # that only claims the type is a custom event, not a message.
    return (
        isinstance(payload, Mapping)
        and payload.get("type") == "token"
        and isinstance(payload.get("text"), str)
    )


INTERRUPT_UPDATE: Final = "__interrupt__"
"""The key of the ``updates`` part a pause yields: ``{"__interrupt__": (Pending, ...)}``."""


def stream_modes(events: Iterable[Event], modes: str | Iterable[str]) -> Iterator[StreamPart]:
    """Project a stream of events into mode-shaped parts, lazily.

    Modes: ``values`` (the channel values after each superstep), ``updates``
    (``{node: update}`` per finished task, and ``{"__interrupt__": pending}``
    when the run pauses, as LangGraph's ``updates`` mode yields it), ``custom`` (each ``ctx.emit``
    payload), ``messages`` (only the payloads that are well-formed tokens:
    a mapping with ``"type": "token"`` and a ``str`` ``"text"``, as
    ``ctx.emit_token`` makes) and ``debug`` (every event as it is).

    Raises:
        ValueError: an unknown mode was asked for.
    """
    wanted = (modes,) if isinstance(modes, str) else tuple(modes)
    unknown = [m for m in wanted if m not in MODES]
    if unknown:
        raise ValueError(f"unknown stream mode {unknown[0]!r}; choose from {', '.join(MODES)}")
    for event in events:
        for mode in wanted:
            data: Any
            if mode == "debug":
                data = event
            elif mode == "values" and isinstance(event, StateEvent):
                data = event.channels
            elif mode == "updates" and isinstance(event, NodeEnd):
                data = {event.node: event.update}
            elif mode == "updates" and isinstance(event, InterruptEvent):
                data = {INTERRUPT_UPDATE: event.pending}
            elif isinstance(event, CustomEvent) and (
                mode == "custom" or (mode == "messages" and _is_token(event.payload))
            ):
                data = event.payload
            else:
                continue
            yield StreamPart(mode=mode, data=data, seq=event.seq, ns=event.ns)
