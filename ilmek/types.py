"""The value objects ilmek hands around: checkpoints, pauses, journals, threads.

Everything here is an immutable ``attrs`` value; nothing here does I/O. The
engine and every checkpointer speak in these types.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, Never, TypeAlias

import attrs

if TYPE_CHECKING:
    # For type checkers only (mypy and pyright bundle typing_extensions): a
    # default lets ``CompiledGraph`` and ``Result`` be written bare, meaning
    # ``[Any]``, in code that does not care about the state's type.
    from attrs import AttrsInstance
    from typing_extensions import TypeVar

    from .events import Event

    StateT = TypeVar("StateT", default=Any)
else:
    from typing import TypeVar

    StateT = TypeVar("StateT")

# The two kinds of state the overloads of GraphBuilder.node and of run and
# stream tell apart: a TypedDict (or a channel map's dict) is a Mapping, an
# attrs class is not (and has __attrs_attrs__).
MappingStateT = TypeVar("MappingStateT", bound=Mapping[str, object])
AttrsStateT = TypeVar("AttrsStateT", bound="AttrsInstance")

# What run and stream take as input on a graph whose state is a Mapping: that
# state, or None. mypy infers a call's type variables in two passes, leaving
# for the second an argument whose parameter holds a callable of a type
# variable; the callable here (which no input is: it would take a Never and
# never return) makes mypy read the state from the graph first and then check
# a dict literal as that TypedDict, instead of inferring it as a dict and
# failing to agree with the graph.
MappingInput: TypeAlias = "MappingStateT | Callable[[MappingStateT, Never], Never] | None"

__all__ = [
    "AnsweredBy",
    "ChannelChange",
    "Checkpoint",
    "Extend",
    "JournalEntry",
    "LazyChannels",
    "PauseKind",
    "PauseTerms",
    "Pending",
    "Replace",
    "Result",
    "ScheduledTask",
    "StateT",
    "ThreadError",
    "ThreadInfo",
    "ThreadStatus",
    "new_checkpoint_id",
    "new_random_id",
    "pause_fields",
    "split_task_id",
    "task_id_for",
    "thread_of_task",
    "utc_now",
]

ThreadStatus = Literal["done", "interrupted", "unfinished", "error"]
THREAD_STATUSES: tuple[str, ...] = ("done", "interrupted", "unfinished", "error")
RunStatus = Literal["done", "interrupted", "error", "aborted"]


def utc_now() -> _dt.datetime:
    """The current time as an aware UTC datetime."""
    return _dt.datetime.now(_dt.UTC)


@attrs.frozen(kw_only=True)
class ScheduledTask:
    """One task a checkpoint schedules for the next superstep.

    ``task_key`` is the node name for a task planned by edges, and
    ``node#n`` for the n-th ``send`` to that node; ``input`` is the send's
    input, which the task sees as its state.
    """

    node: str
    task_key: str
    is_send: bool = False
    input: Any = None


PauseKind = Literal["person", "timer"]
AnsweredBy = Literal["person", "deadline", "token", "timer"]


@attrs.frozen(kw_only=True)
class PauseTerms:
    """What a node asked of a pause besides its payload: its contract, deadline and kind.

    Attributes:
        answers: The contract's JSON form (:meth:`ilmek.answers.Shape.to_json`), or ``None``.
        deadline: When it times out or, for a timer, comes due (aware, UTC).
        on_timeout: The answer applied at the deadline (in its stored form).
        kind: ``"person"`` or ``"timer"``.
    """

    answers: Mapping[str, Any] | None = None
    deadline: _dt.datetime | None = None
    on_timeout: Any = None
    kind: PauseKind = "person"


def pause_fields(terms: PauseTerms | None) -> dict[str, Any]:
    """The :class:`Pending` fields ``terms`` fill (none for a plain pause)."""
    return {} if terms is None else attrs.asdict(terms, recurse=False)


@attrs.frozen(kw_only=True)
class Pending:
    """An open pause, waiting for a person's answer (or, for a timer, for its time).

    ``id`` is unique within the thread (``<task_key>:<key>``) and is what
    ``resume_keyed`` answers by; ``key`` is unique within its task and
    addresses the journal entry; ``task_id`` names the journal the answer is
    recorded in.

    Attributes:
        answers: The pause's contract as stored: the JSON form of an
            :mod:`ilmek.answers` shape, or ``None`` (any answer).
        deadline: When the pause times out (aware, UTC), or ``None``; for a
            timer, when it is due.
        on_timeout: The answer recorded once ``deadline`` has passed (``None``
            for a timer).
        kind: ``"person"`` (someone answers) or ``"timer"`` (``ctx.sleep``).
        ns: The subgraph path of the task that paused (``()`` at the root).
    """

    id: str
    task_id: str
    node: str
    key: str
    payload: Any = None
    answers: Mapping[str, Any] | None = None
    deadline: _dt.datetime | None = None
    on_timeout: Any = None
    kind: PauseKind = "person"
    ns: tuple[str, ...] = ()

    @property
    def task_key(self) -> str:
        """The key of the task that paused: ``id`` without its ``:<key>`` ending.

        A subgraph's pause (``ns`` set) is the pause of the task running the
        subgraph: its key is the last part of ``task_id``.
        """
        if self.ns:
            return split_task_id(self.task_id)[2]
        suffix = f":{self.key}"
        return self.id[: -len(suffix)] if self.id.endswith(suffix) else self.id


@attrs.frozen(kw_only=True)
class JournalEntry:
    """One record of a task's journal: a completed step or an interrupt.

    For a step, ``value`` is what the step's function returned. For an
    interrupt, ``payload`` is what was asked and, once ``answered``, ``value``
    is the answer and ``by`` who gave it: ``"person"`` (a resume),
    ``"deadline"`` (the pause's ``on_timeout``, applied by ``tick``),
    ``"token"`` (an answer link) or ``"timer"`` (a ``ctx.sleep`` that came
    due); ``None`` in journals written before ilmek kept it. An
    ``unstored`` entry records a step whose function ran but whose result
    could not be stored: ``payload`` names the type that could not be (see
    :class:`~ilmek.errors.StepResultNotStoredError`).
    """

    key: str
    kind: Literal["step", "interrupt", "unstored"] = "step"
    value: Any = None
    payload: Any = None
    answered: bool = False
    by: AnsweredBy | None = None


class LazyChannels(Mapping[str, Any]):
    """Channel values that are loaded from storage the first time they are read.

    Checkpoint listings hand these out so that listing a long history does not
    decode every checkpoint's state. It compares equal to a plain ``dict`` with
    the same items.
    """

    __slots__ = ("_load", "_lock", "_values")

    def __init__(self, load: Callable[[], Mapping[str, Any]]) -> None:
        self._load: Callable[[], Mapping[str, Any]] | None = load
        self._values: Mapping[str, Any] | None = None
        self._lock = threading.Lock()

    def _materialize(self) -> Mapping[str, Any]:
        if self._values is None:
            with self._lock:
                if self._values is None:
                    assert self._load is not None
                    self._values = self._load()
                    self._load = None
        return self._values

    @property
    def loaded(self) -> bool:
        """Whether the values have been read from storage yet."""
        return self._values is not None

    def __getitem__(self, key: str) -> Any:
        return self._materialize()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._materialize())

    def __len__(self) -> int:
        return len(self._materialize())

    def __repr__(self) -> str:
        if self._values is None:
            return "LazyChannels(<not loaded>)"
        return f"LazyChannels({dict(self._values)!r})"


def _freeze_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, LazyChannels):
        return value
    return dict(value)


def _tasks(values: Iterable[ScheduledTask]) -> tuple[ScheduledTask, ...]:
    return tuple(values)


def _pauses(values: Iterable[Pending]) -> tuple[Pending, ...]:
    return tuple(values)


def _journals(
    values: Mapping[str, Iterable[JournalEntry]] | None,
) -> dict[str, tuple[JournalEntry, ...]]:
    return {key: tuple(entries) for key, entries in (values or {}).items()}


def _ids(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A thread's state after a superstep, and what runs next.

    Checkpoints are never changed once written. ``parent_id`` links each one to
    the checkpoint it grew from, so a thread's checkpoints form a tree; the
    latest is the one with the greatest ``id``.

    Attributes:
        id: Sorts lexically in creation order within a thread.
        thread_id: The thread it belongs to.
        parent_id: The checkpoint it grew from (``None`` for a thread's first).
        plan_id: The checkpoint whose state ``next`` was planned from.
        channels: The channel values that have been written (channels never
            written read as their defaults and are absent here).
        next: The tasks of the next superstep, in task order.
        pending: The open pauses; empty unless the thread waits for a person.
        task_journals: Journals carried inside the checkpoint itself, by task
            key (what checkpoints written by ilmek 0.1 kept at a pause; new
            checkpoints leave it empty and use ``journal_chain``).
        journal_chain: The checkpoints whose recorded steps the tasks of
            ``next`` inherit when they run from this checkpoint (oldest
            first): a pause, a continued crash or a fork carries the steps
            its superstep already paid for, without copying them.
        step: The superstep counter along this branch.
        ts: When it was written (aware, UTC).
        metadata: Free-form facts about how it came to be (``source``,
            ``run_id``, ``writes``...).
    """

    id: str
    thread_id: str
    parent_id: str | None = None
    plan_id: str | None = None
    channels: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze_mapping)
    next: tuple[ScheduledTask, ...] = attrs.field(default=(), converter=_tasks)
    pending: tuple[Pending, ...] = attrs.field(default=(), converter=_pauses)
    task_journals: Mapping[str, tuple[JournalEntry, ...]] = attrs.field(factory=dict, converter=_journals)
    journal_chain: tuple[str, ...] = attrs.field(default=(), converter=_ids)
    step: int = 0
    ts: _dt.datetime = attrs.field(factory=utc_now)
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze_mapping)

    @property
    def status(self) -> ThreadStatus:
        """``interrupted`` with open pauses, ``unfinished`` with tasks to run, else ``done``."""
        if self.pending:
            return "interrupted"
        if self.next:
            return "unfinished"
        return "done"


@attrs.frozen(kw_only=True)
class ThreadError:
    """Why a thread's last run failed, as stored with the thread.

    Attributes:
        type: The exception's class name (qualified by its module when not a builtin).
        message: The exception's message.
        node: The node that failed (``None`` when the run failed outside a node).
        checkpoint_id: The checkpoint the failed superstep ran from.
        at: When the run failed (aware, UTC).
        traceback: Where it was raised: the formatted traceback (cut to its
            last lines when very long), or ``None`` when it was not kept.
        tasks: The keys of the superstep's tasks that raised, the one whose
            error this is first: in a fan-out, which sends of ``node``
            failed. Empty when not known (a failure outside a task, or one
            recorded by an earlier version).
    """

    type: str
    message: str
    node: str | None = None
    checkpoint_id: str | None = None
    at: _dt.datetime = attrs.field(factory=utc_now)
    traceback: str | None = None
    tasks: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        error: BaseException,
        *,
        node: str | None,
        checkpoint_id: str | None,
        tasks: tuple[str, ...] = (),
    ) -> ThreadError:
        """The record of ``error``, raised in ``node`` (``None``: outside any node) of a superstep run
        from ``checkpoint_id``: its class, message and traceback; ``tasks``: the keys of the tasks that
        raised, this error's first."""
        import traceback

        kind = type(error)
        return cls(
            type=kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}",
            message=str(error),
            node=node,
            checkpoint_id=checkpoint_id,
            traceback="".join(traceback.format_exception(error)),
            tasks=tasks,
        )


@attrs.frozen(kw_only=True)
class ThreadCancel:
    """How a thread's last run was cancelled, as stored with the thread.

    Attributes:
        reason: Why, as the canceller said it (``request_cancel``'s ``reason``,
            or the run's own cancel event's).
        checkpoint_id: The checkpoint the run stopped at; the thread can be
            continued from it.
        at: When the run stopped (aware, UTC).
    """

    reason: str
    checkpoint_id: str | None = None
    at: _dt.datetime = attrs.field(factory=utc_now)


@attrs.frozen(kw_only=True)
class ThreadInfo:
    """A thread as the host API lists it.

    Attributes:
        id: The thread id.
        created_at: When the thread was first written.
        updated_at: When it last changed.
        status: ``interrupted`` (waiting for a person), ``unfinished`` (tasks
            planned), ``error`` (its last run failed; see ``error``) or ``done``.
        step: The superstep counter of its latest checkpoint.
        checkpoint_id: Its latest checkpoint.
        metadata: What :meth:`~ilmek.Checkpointer.put_thread_metadata` stored.
        error: Why the last run failed, when ``status`` is ``error``.
        running: Whether a live run holds the thread right now.
        held_since: When that run took the thread.
        held_by: Which process holds it (``pid N on HOST``), when a live run
            does and its process said so.
        cancelled: How the last run was cancelled, when it was (until the
            thread moves on).
        due_at: The earliest deadline or timer of its open pauses (aware,
            UTC), or ``None``: when :func:`ilmek.tick` has work on it.
    """

    id: str
    created_at: _dt.datetime
    updated_at: _dt.datetime
    status: ThreadStatus
    step: int
    checkpoint_id: str | None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    error: ThreadError | None = None
    running: bool = False
    held_since: _dt.datetime | None = None
    held_by: str | None = None
    cancelled: ThreadCancel | None = None
    due_at: _dt.datetime | None = None


@attrs.frozen
class Replace:
    """A channel's new value, stored whole."""

    value: Any


def _items(values: Iterable[Any]) -> tuple[Any, ...]:
    # A Python function, not ``tuple`` itself: attrs reads a converter's
    # signature, and for a builtin that means tokenizing its text signature,
    # which cost ``import ilmek`` 6 ms.
    return tuple(values)


@attrs.frozen
class Extend:
    """Items added to the end of a list channel; the rest of the list is unchanged."""

    items: tuple[Any, ...] = attrs.field(converter=_items)


ChannelChange = Replace | Extend
"""What a superstep did to one channel, so a backend can store only the change."""


@attrs.frozen(kw_only=True)
class Result(Generic[StateT]):
    """How a run ended; generic in the graph's state type (``Result[MyState]``).

    Attributes:
        status: ``done``, ``interrupted``, ``error`` or ``aborted``.
        state: The final state as nodes see it (a dict, or an instance of
            the graph's ``attrs`` class), when ``done``; ``None`` otherwise,
            as in the reference (read a paused, failed or aborted thread
            with :func:`~ilmek.thread_state`). Typed as the state, not as
            ``state | None``: a type checker cannot tell that ``status ==
            "done"`` means it is set, and code that checked would need a cast.
        pending: The open pauses, when ``interrupted``.
        errors: ``(node, exception)`` pairs, when ``error``.
        abort_reason: Why the run stopped, when ``aborted``.
        thread_id: The thread.
        run_id: This run.
        checkpoint_id: The thread's latest checkpoint when the run ended.
        events: Every event the run yielded, in order.
        graph_name: The graph that ran.
    """

    status: RunStatus
    # None unless done (see above); typed for the code that checked status.
    state: StateT = attrs.field(default=None)
    pending: tuple[Pending, ...] = ()
    errors: tuple[tuple[str, BaseException], ...] = ()
    abort_reason: str | None = None
    thread_id: str
    run_id: str
    checkpoint_id: str | None = None
    # Left out of the repr: a run yields thousands of events, and print(result)
    # should show how the run ended, not all of them.
    events: tuple[Event, ...] = attrs.field(default=(), repr=False)
    graph_name: str = ""

    def __repr__(self) -> str:
        """The fields as attrs shows them; a failed run leads with its node and exception instead."""
        ending = f"thread_id={self.thread_id!r}, run_id={self.run_id!r}, checkpoint_id={self.checkpoint_id!r}"
        ending += f", graph_name={self.graph_name!r}"
        if self.status == "error" and self.errors:
            node, error = self.errors[0]
            more = f", errors={self.errors!r}" if len(self.errors) > 1 else ""
            return f"Result(status='error', node={node!r}, error={error!r}{more}, {ending})"
        return (
            f"Result(status={self.status!r}, state={self.state!r}, pending={self.pending!r}, "
            f"errors={self.errors!r}, abort_reason={self.abort_reason!r}, {ending})"
        )

    def raise_for_status(self) -> Result[StateT]:
        """Re-raise the first node error, if the run ended ``error``; else return self.

        The exception gets a note naming the graph, the node and the thread.
        """
        if self.status == "error" and self.errors:
            node, error = self.errors[0]
            note = f"raised by node {node!r} of graph {self.graph_name!r}, thread {self.thread_id!r}"
            if note not in getattr(error, "__notes__", ()):
                error.add_note(note)
            raise error
        return self


# --- task ids -----------------------------------------------------------------


def task_id_for(thread_id: str, base_checkpoint_id: str, task_key: str) -> str:
    """The journal id of a task: ``<thread>:<checkpoint it runs from>:<task key>``."""
    return f"{thread_id}:{base_checkpoint_id}:{task_key}"


# A checkpoint id as new_checkpoint_id makes it (possibly extending a foreign one).
_TASK_ID = re.compile(r"(?s)(.*):([0-9a-f]{12}-[0-9a-f]{4}-[0-9a-f]{8}(?:\.[^:]*)?):(.*)")


def split_task_id(task_id: str) -> tuple[str, str, str]:
    """Split a task id into ``(thread_id, checkpoint_id, task_key)``.

    Thread ids and task keys may contain ``:``; the checkpoint id in the
    middle is recognized by its shape. Ids of another shape split at their
    last two colons.

    Raises:
        ValueError: ``task_id`` was not made by :func:`task_id_for`.
    """
    if not isinstance(task_id, str):
        raise TypeError(f"a task id is a string, got {type(task_id).__name__}")
    match = _TASK_ID.fullmatch(task_id)
    if match is not None:
        return match.group(1), match.group(2), match.group(3)
    parts = task_id.rsplit(":", 2)
    if len(parts) != 3:
        raise ValueError(f"task id {task_id!r} is not of the form '<thread>:<checkpoint>:<task key>'")
    return parts[0], parts[1], parts[2]


def thread_of_task(task_id: str) -> str:
    """The thread a task id belongs to (the whole id, if it is not a task id)."""
    try:
        return split_task_id(task_id)[0]
    except ValueError:
        return task_id


# --- run and thread ids ---------------------------------------------------------


def new_random_id() -> str:
    """32 random hex digits shaped as ``uuid.uuid4().hex`` (a version 4 UUID's fixed bits set).

    For run ids and the thread ids ilmek picks; without importing :mod:`uuid`
    (1 ms of ``import ilmek``).
    """
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # the version: 4, random
    raw[8] = raw[8] & 0x3F | 0x80  # the variant: RFC 4122
    return raw.hex()


# --- checkpoint ids -----------------------------------------------------------

_ID_LOCK = threading.Lock()
_last_id_parts: tuple[int, int] = (0, 0)
_SEQ_LIMIT = 0xFFFF


def _draw_process_tag() -> None:
    global _process_tag
    _process_tag = f"{int.from_bytes(os.urandom(4), 'big'):08x}"


# The last part only tells apart ids two processes make in the same
# millisecond with the same sequence (one process never makes two such ids),
# so it is drawn once per process, and again in a forked child: no system
# call per checkpoint, and no ``random`` module.
_process_tag = ""
_draw_process_tag()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_draw_process_tag)


def _format_id(millis: int, seq: int) -> str:
    return f"{millis:012x}-{seq:04x}-{_process_tag}"


def _parse_id(checkpoint_id: str) -> tuple[int, int] | None:
    parts = checkpoint_id.split("-")
    if len(parts) != 3 or len(parts[0]) != 12 or len(parts[1]) != 4:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None


def new_checkpoint_id(after: str | None = None) -> str:
    """A new checkpoint id, greater than ``after`` and than every id this process made.

    Ids are ``<milliseconds>-<sequence>-<random>`` in fixed-width hex, so they
    sort lexically in creation order. Passing the thread's latest id as
    ``after`` keeps a thread's ids increasing even when machines' clocks
    disagree.
    """
    global _last_id_parts
    with _ID_LOCK:
        candidate = (time.time_ns() // 1_000_000, 0)
        floors = [_last_id_parts]
        parsed_after = _parse_id(after) if after is not None else None
        if parsed_after is not None:
            floors.append(parsed_after)
        for floor in floors:
            if candidate <= floor:
                millis, seq = floor
                candidate = (millis + 1, 0) if seq >= _SEQ_LIMIT else (millis, seq + 1)
        _last_id_parts = candidate
        new_id = _format_id(*candidate)
    if after is not None and parsed_after is None and new_id <= after:
        # ``after`` was made by someone else and sorts above ours: extending it
        # keeps the order (a string sorts before every extension of itself).
        new_id = f"{after}.{new_id}"
    return new_id
