"""The context a node receives: journaled steps, interrupts, live events.

:class:`TaskJournal` is the replay memory of one task: ``ctx.step`` and
``ctx.interrupt`` look keys up in it and record what is new. A record is
*persisted first, then remembered, then returned*, so a step whose record
did not land is never replayed from memory. :class:`PlanContext` is the
narrower view that guards and routers receive at plan time: it has no
journal, so ``step`` and ``interrupt`` refuse, and ``emit`` does nothing.
"""

from __future__ import annotations

import datetime as _dt
import functools
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, overload

from . import checks, pausing, tracing
from .channel import UNSET
from .errors import (
    GraphError,
    InterruptSignal,
    InvalidArgumentError,
    NondeterminismError,
    ResumeError,
    SerializationError,
    StepResultNotStoredError,
)
from .namespaces import SEPARATOR
from .types import JournalEntry, PauseTerms

if TYPE_CHECKING:
    import logging

    from .answers import Shape
    from .graph import CompiledGraph

__all__ = ["NodeContext", "PlanContext", "StepGate", "TaskJournal"]

T = TypeVar("T")
P = ParamSpec("P")


class StepGate(Protocol):
    """What a run lets through before a step's function runs, and hears of once it is over."""

    def enter(self) -> None:
        """Called before the function: the run is open and holds its thread, with lease enough to record.

        Raises:
            ThreadBusyError: the run lost its thread (or is closing); the function must not run.
        """

    def leave(self) -> None:
        """Called once the function returned and its record is written, or it raised."""


class TaskJournal:
    """One task's journal during a superstep.

    Args:
        task_id: The journal's id (``<thread>:<checkpoint>:<task key>``).
        entries: What earlier passes recorded.
        persist: Stores one new entry; must not return before it is durable.
    """

    def __init__(
        self,
        task_id: str,
        entries: Sequence[JournalEntry],
        persist: Callable[[JournalEntry], None],
    ) -> None:
        self.task_id = task_id
        self._entries: dict[str, JournalEntry] = {e.key: e for e in entries}
        self._persist = persist
        self._counts: dict[str, int] = {}
        self._requested: set[str] = set()
        # A node may call ctx.step from threads of its own.
        self._lock = threading.Lock()
        # Which of the node's threads are inside a step's function now (made at the first step).
        self._inside_step: threading.local | None = None

    def begin_attempt(self) -> None:
        """Reset the per-pass key counters: the body runs again from the top."""
        with self._lock:
            self._counts.clear()
            self._requested.clear()

    def claim(self, key: str, what: str = "a step key") -> str:
        """The journal key of the next use of ``key`` in this pass (``key#n``).

        Raises:
            InvalidArgumentError: ``key`` is not a non-empty string of text of
                at most :data:`ilmek.checks.MAX_KEY_BYTES` bytes (checked before
                anything runs).
        """
        key = checks.journal_key(key, what)
        with self._lock:
            index = self._counts.get(key, 0)
            self._counts[key] = index + 1
            full = f"{key}#{index}"
            self._requested.add(full)
        return full

    def next_key(self, key: str) -> str:
        """The full key the next :meth:`claim` of ``key`` would return (nothing is claimed)."""
        with self._lock:
            return f"{key}#{self._counts.get(key, 0)}"

    def get(self, key: str) -> JournalEntry | None:
        """The entry recorded under a full key, if any."""
        with self._lock:
            return self._entries.get(key)

    def record(self, entry: JournalEntry, *, durable: bool = True) -> None:
        """Persist ``entry`` (unless ``durable`` is false), then remember it.

        If persisting fails, nothing is remembered: a retry of the node runs
        the step again rather than replaying a record that never landed.
        """
        if durable:
            self._persist(entry)
        with self._lock:
            self._entries[entry.key] = entry

    def entries(self) -> tuple[JournalEntry, ...]:
        """Every entry, in the order first recorded."""
        with self._lock:
            return tuple(self._entries.values())

    def unrequested(self) -> list[str]:
        """Recorded keys this pass never asked for (what strict mode checks)."""
        with self._lock:
            return [key for key in self._entries if key not in self._requested]

    def open_pauses(self) -> list[str]:
        """Pauses this pass asked for that have no answer (a node that swallowed one)."""
        with self._lock:
            return [
                key
                for key in self._requested
                if (entry := self._entries.get(key)) is not None
                and entry.kind == "interrupt"
                and not entry.answered
            ]

    def snapshot(self) -> Mapping[str, JournalEntry]:
        """A read-only copy of the entries as they stand now."""
        with self._lock:
            return types.MappingProxyType(dict(self._entries))

    @property
    def in_step(self) -> bool:
        """Whether the calling thread is inside a step's function."""
        return bool(getattr(self._inside_step, "depth", 0))

    def enter_step(self) -> None:
        inside = self._inside_step
        if inside is None:
            with self._lock:
                if self._inside_step is None:
                    self._inside_step = threading.local()
                inside = self._inside_step
        inside.depth = getattr(inside, "depth", 0) + 1

    def leave_step(self) -> None:
        assert self._inside_step is not None, "leave_step() without enter_step()"
        self._inside_step.depth -= 1


class PlanContext:
    """What guards and routers see: the run's identity and the state, no effects.

    Routers and guards run at plan time, outside any task: there is no
    journal, so :meth:`step` and :meth:`interrupt` refuse with a
    :class:`~ilmek.errors.GraphError`, and :meth:`emit` does nothing.
    """

    def __init__(
        self,
        *,
        graph: CompiledGraph,
        thread_id: str,
        run_id: str,
        step_index: int,
        recursion_limit: int,
        remaining_steps: int,
        state: Any,
        meta: Mapping[str, Any],
        cancel: threading.Event,
    ) -> None:
        self.graph = graph
        self.thread_id = thread_id
        self.run_id = run_id
        self.step_index = step_index
        self.recursion_limit = recursion_limit
        self.remaining_steps = remaining_steps
        self.state = state
        self.meta = meta
        self.cancel = cancel

    def _plan_time(self, what: str) -> GraphError:
        return GraphError(
            f"ctx.{what}() is not available in a router or guard: they run at plan time, outside any "
            f"task, and have no journal (thread {self.thread_id!r}). Route on state; do the work in a node"
        )

    def step(self, key: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Refused: plan-time code has no journal.

        Raises:
            GraphError: always.
        """
        raise self._plan_time("step")

    def interrupt(
        self,
        payload: Any = None,
        key: str | None = None,
        *,
        answers: Shape[Any] | None = None,
        deadline: _dt.timedelta | _dt.datetime | None = None,
        on_timeout: Any = UNSET,
    ) -> Any:
        """Refused: plan-time code cannot pause (a node's ``ctx.interrupt`` can).

        Raises:
            GraphError: always.
        """
        raise self._plan_time("interrupt")

    def sleep(self, key: str, *, seconds: float | None = None, until: _dt.datetime | None = None) -> None:
        """Refused: plan-time code cannot wait.

        Raises:
            GraphError: always.
        """
        raise self._plan_time("sleep")

    def call(self, subgraph: CompiledGraph, input: Any = None, *, key: str) -> Any:  # noqa: A002
        """Refused: plan-time code cannot run a subgraph.

        Raises:
            GraphError: always.
        """
        raise self._plan_time("call")

    def emit(self, payload: Any) -> None:
        """Does nothing at plan time (routers and guards have no place in the stream)."""

    def emit_token(self, text: str, meta: Any = None) -> None:
        """Does nothing at plan time."""


class NodeContext(PlanContext):
    """The handle a node receives as ``ctx``.

    Attributes:
        thread_id: The thread.
        run_id: This run; a resume is a new run.
        node: The node's name.
        task_id: This task's journal id.
        step_index: The superstep counter of the superstep running.
        recursion_limit: The run's superstep budget.
        remaining_steps: How many supersteps this run may still take,
            this one included.
        state: The task's state (read it; never mutate it).
        meta: What the caller passed as ``meta=``.
        cancel: The run's cancel event; pass it to long waits. It is also
            set when another process asks the run to stop.
        graph: The compiled graph.
    """

    def __init__(
        self,
        *,
        node: str,
        task_id: str,
        journal: TaskJournal,
        emit: Callable[[Any], None],
        strict: bool,
        gate: StepGate | None = None,
        can_pause: bool = True,
        children: Callable[[], Any] | None = None,
        **plan: Any,
    ) -> None:
        super().__init__(**plan)
        #: Makes what runs subgraphs for this task (see :attr:`_children`), if anything.
        self._make_children = children
        self.node = node
        self.task_id = task_id
        self._journal = journal
        self._emit = emit
        self._gate = gate
        self._can_pause = can_pause
        self._body_thread: int | None = None
        #: The task's span, parent of its steps' (see ilmek.tracing); None without OpenTelemetry.
        self._span: Any = None
        self.strict = strict

    @functools.cached_property
    def _children(self) -> Any:
        """What runs subgraphs for this task (ilmek.execution.children.ChildHost), or None.

        Made at the first subgraph call: most tasks never make one.
        """
        return None if self._make_children is None else self._make_children()

    @functools.cached_property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger carrying thread, run and node (``ilmek.node``), made on first use."""
        import logging

        from .logs import logger

        context = {"thread_id": self.thread_id, "run_id": self.run_id, "node": self.node}
        return logging.LoggerAdapter(logger("ilmek.node"), context)

    def _begin_attempt(self) -> None:
        """The engine is about to call the node's body on this thread."""
        self._body_thread = threading.get_ident()

    @property
    def journal(self) -> Mapping[str, JournalEntry]:
        """This task's journal as it stands now: a read-only copy (for debugging)."""
        return self._journal.snapshot()

    def step(self, key: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` once, ever, for this task.

        On a replay the recorded value is returned and ``fn`` is not called.
        Otherwise ``fn`` runs and its result is persisted before ``step``
        returns. A ``fn`` that raises records nothing. Use a key derived from
        the data inside loops: a key used again in one pass is counted
        (``charge#0``, ``charge#1``...).

        A result that cannot be stored (an SDK's response object, say) is
        recorded as *run*: ``fn`` is not called again, by a retry or a later
        run, until :func:`ilmek.forget_unstored_steps` says it may be.

        Raises:
            NondeterminismError: ``key`` names an interrupt in the journal.
            StepResultNotStoredError: ``fn`` ran (now or before), but its
                result cannot be stored (a :class:`SerializationError`).
            ThreadBusyError: the run lost its hold on the thread; ``fn`` did not run.
        """
        full = self._journal.claim(key)
        entry = self._journal.get(full)
        if entry is not None:
            if entry.kind == "unstored":
                raise self._not_stored(full, entry.payload, now=False)
            if entry.kind != "step":
                raise NondeterminismError(
                    f"node {self.node!r} asked for step {full!r}, but the journal holds an "
                    f"interrupt under that key (thread {self.thread_id!r}); steps and "
                    "interrupts need distinct keys",
                    key=full,
                    node=self.node,
                    thread_id=self.thread_id,
                )
            return entry.value  # type: ignore[no-any-return]
        gate = self._gate
        if gate is not None:
            # Make sure the thread is still ours before the effect, not after;
            # the run then waits for this step before it gives the thread back.
            gate.enter()
        span = tracing.child("ilmek.step", self._span, {"ilmek.step_key": full, "ilmek.node": self.node})
        try:
            self._journal.enter_step()
            try:
                if span is None:
                    value = fn(*args, **kwargs)
                else:
                    with tracing.current(span):
                        value = fn(*args, **kwargs)
            finally:
                self._journal.leave_step()
            self._record_result(full, value)
        except BaseException as error:
            tracing.end(span, error)
            raise
        finally:
            if gate is not None:
                gate.leave()
        tracing.end(span)
        return value

    def _record_result(self, key: str, value: Any) -> None:
        """Record what a step's function returned; if it cannot be stored, record that the step ran."""
        try:
            self._journal.record(JournalEntry(key=key, kind="step", value=value))
        except SerializationError as error:
            type_name = error.type_name or f"{type(value).__module__}.{type(value).__qualname__}"
            # The effect happened. A marker that always stores says so, so no
            # retry and no later run calls the function again unasked.
            self._journal.record(JournalEntry(key=key, kind="unstored", payload=type_name))
            raise self._not_stored(key, type_name, now=True) from error

    def _not_stored(self, key: str, type_name: Any, *, now: bool) -> StepResultNotStoredError:
        when, could = ("", "cannot") if now else (" on an earlier attempt or run", "could not")
        return StepResultNotStoredError(
            f"node {self.node!r} ran step {key!r}{when}, but its result (of type {type_name}) {could} be "
            f"stored (thread {self.thread_id!r}). The step is recorded as run, so no retry or later run "
            "calls its function again. Return plain data from the step (a dict, say) or register the "
            "class with ilmek.serde.register, then either call ilmek.forget_unstored_steps(graph, "
            f"thread_id={self.thread_id!r}) to let it run once more (its effect repeats: give it an "
            "idempotency key) or catch this error in the node to go on without the result",
            key=key,
            node=self.node,
            thread_id=self.thread_id,
            type_name=type_name if isinstance(type_name, str) else None,
        )

    @overload
    def interrupt(
        self,
        payload: Any = None,
        key: str | None = None,
        *,
        answers: Shape[T],
        deadline: _dt.timedelta | _dt.datetime | None = None,
        on_timeout: Any = UNSET,
    ) -> T: ...
    @overload
    def interrupt(
        self,
        payload: Any = None,
        key: str | None = None,
        *,
        answers: Shape[Any] | None = None,
        deadline: _dt.timedelta | _dt.datetime | None = None,
        on_timeout: Any = UNSET,
    ) -> Any: ...
    def interrupt(
        self,
        payload: Any = None,
        key: str | None = None,
        *,
        answers: Shape[Any] | None = None,
        deadline: _dt.timedelta | _dt.datetime | None = None,
        on_timeout: Any = UNSET,
    ) -> Any:
        """Pause for a person and return their answer.

        On the first pass the pause is recorded and the task halts (the run
        ends ``interrupted``); after ``resume`` the node runs again from the
        top, its completed steps replay, and this returns the answer.

        The contract, ``answers=``, is a shape of :mod:`ilmek.answers`. It is
        stored with the pause (so the console and the CLI draw and check it
        without the graph), ``resume`` refuses an answer that does not fit
        before anything is written, and it decides what this returns (to
        mypy too):

        * ``choice(*options)``: one of the options, as given (a ``str`` for
          a choice of strings);
        * ``text(max_length=None, pattern=None)``: a ``str`` whose whole
          matches ``pattern``;
        * ``number(minimum=None, maximum=None, integer=False)``: a number
          within the bounds, an ``int`` with ``integer=True``;
        * ``boolean()``: a ``bool``;
        * ``review(draft)``: an :class:`ilmek.Review`, ``action`` one of
          ``"accept"`` (``value`` is the draft), ``"edit"`` (``value`` is the
          person's version) or ``"reject"`` (``reason`` says why);
        * ``schema(json_schema)``: a JSON value valid under the schema
          (the ``[schema]`` extra).

        Each shape's ``.check(fn)`` adds a rule of your own. Without a
        contract any JSON value is an answer and the node checks it itself.

        Args:
            payload: What the person is asked (stored with the pause).
            key: The pause's key in the task's journal (default ``"interrupt"``).
            answers: The contract (above); ``None`` accepts any answer.
            deadline: A ``timedelta`` (from now, when the pause is made) or an
                aware ``datetime``: once passed, :func:`ilmek.tick` records
                ``on_timeout`` as the answer (``by="deadline"``).
            on_timeout: The answer applied at the deadline; it must fit the contract.

        Raises:
            InterruptSignal: to halt the task; let it propagate.
            InvalidArgumentError: a ``deadline`` without ``on_timeout``, an
                ``on_timeout`` that does not fit, ``answers`` not a shape.
            AnswerRejectedError: the recorded answer fails a Python check the
                resume could not run (see :meth:`ilmek.answers.Shape.check`).
            NondeterminismError: ``key`` names a step in the journal.
            GraphError: called inside a step's function.
            ResumeError: the run has no checkpointer, so nobody could answer.
        """
        where = f"ctx.interrupt() of node {self.node!r} (thread {self.thread_id!r})"
        terms = pausing.person_terms(answers, deadline, on_timeout, where=where)
        full = self._claim_pause("interrupt", "interrupt" if key is None else key)
        entry = self._answered_or_pause(full, payload, terms)
        return pausing.received(answers, entry, pause=full, thread_id=self.thread_id)

    def sleep(self, key: str, *, seconds: float | None = None, until: _dt.datetime | None = None) -> None:
        """Wait, durably, ``seconds`` from now or ``until`` an aware datetime (exactly one).

        The first pass records a ``timer`` pause due then and the run ends
        ``interrupted``; once it is due, :func:`ilmek.tick` continues the
        thread and this returns ``None``; on replay it returns at once. Steps
        before it never run again.

        Raises:
            InterruptSignal: to halt the task; let it propagate.
            InvalidArgumentError: neither or both of ``seconds`` and ``until``,
                a negative ``seconds``, a naive ``until``.
        """
        where = f"ctx.sleep() of node {self.node!r} (thread {self.thread_id!r})"
        full = self._claim_pause("sleep", key)
        entry = self._journal.get(full)
        if entry is not None and not entry.answered and isinstance(entry.payload, Mapping):
            # Asked again before it came due (a fork, a retry): the time first set stands.
            terms = pausing.timer_terms(None, entry.payload.get("until"), where=where)
        else:
            terms = pausing.timer_terms(seconds, until, where=where)
        self._answered_or_pause(full, {"until": terms.deadline}, terms)

    def _claim_pause(self, what: str, key: str) -> str:
        """The journal key of a pause asked by ``ctx.<what>()``, once it is sure it may pause here."""
        if self._body_thread is not None and threading.get_ident() != self._body_thread:
            raise GraphError(
                f"node {self.node!r} called ctx.{what}() from a thread other than the one running "
                f"the node (thread {self.thread_id!r}): only the node itself can pause, since a pause "
                "asked from a step's own threads would let that step's effect run again on resume. "
                "Ask from the node, then hand the answer to your threads",
                node=self.node,
            )
        if self._journal.in_step:
            raise GraphError(
                f"node {self.node!r} called ctx.{what}() inside the function of a ctx.step() "
                f"(thread {self.thread_id!r}): the step would be recorded only after the answer, so its "
                "function would run again on resume. Ask first, then pass the answer to the step"
            )
        return self._journal.claim(key, "an interrupt key" if what == "interrupt" else "a timer key")

    def _answered_or_pause(self, full: str, payload: Any, terms: PauseTerms | None) -> JournalEntry:
        """The answered entry under ``full``; else the pause is made (or asked again) by raising."""
        entry = self._journal.get(full)
        if entry is not None:
            if entry.kind != "interrupt":
                raise NondeterminismError(
                    f"node {self.node!r} asked for interrupt {full!r}, but the journal holds a "
                    f"step under that key (thread {self.thread_id!r}); steps and interrupts "
                    "need distinct keys",
                    key=full,
                    node=self.node,
                    thread_id=self.thread_id,
                )
            if entry.answered:
                return entry
            raise InterruptSignal(full, entry.payload, terms)
        if not self._can_pause:
            raise ResumeError(
                f"node {self.node!r} asked a person (ctx.interrupt) in a run without a checkpointer "
                f"(thread {self.thread_id!r}): the pause would be lost with the run and nobody could "
                "answer it. Run with a checkpointer (InMemoryCheckpointer() will do) and a thread_id",
                thread_id=self.thread_id,
            )
        # The pause itself is recorded with the pause checkpoint, not here:
        # until the superstep commits there is nothing to answer.
        self._journal.record(JournalEntry(key=full, kind="interrupt", payload=payload), durable=False)
        raise InterruptSignal(full, payload, terms)

    def call(self, subgraph: CompiledGraph, input: Any = None, *, key: str) -> Any:  # noqa: A002
        """Run ``subgraph`` as a journaled child of this task and return its final state.

        The child runs under this run's hold, in this thread's store, under
        the namespace ``"<key>#<n>:<task key>"``; its events join this run's
        stream with that ``ns``, a pause inside it pauses this run (answer it
        by the id the pause carries), and its completed steps never run
        again on a resume, a retry, crash recovery or a fork.

        Args:
            subgraph: A compiled graph.
            input: The child's input, folded through its reducers.
            key: The call's key in this task's journal (counted when reused).

        Raises:
            InterruptSignal: the child paused; let it propagate.
            SubgraphError: the child failed (the chained error says why).
            InvalidArgumentError: ``key`` is not a step key, or holds U+001F.
        """
        if self._children is None:
            raise GraphError(
                f"ctx.call() is not available here (node {self.node!r}, thread {self.thread_id!r})"
            )
        if isinstance(key, str) and SEPARATOR in key:
            # It separates a child thread's id into its parts: in a key it would make a grandchild of a child.
            raise InvalidArgumentError(
                f"a call key may not hold U+001F (node {self.node!r}, thread {self.thread_id!r}): ilmek "
                "separates a subgraph thread's id with it; choose another key"
            )
        part = f"{self._journal.claim(key, 'a call key')}:{self._children.task_key}"
        return self._children.call(self, subgraph, input, part)

    def emit(self, payload: Any) -> None:
        """Push a ``custom`` event to the run's stream now (not journaled)."""
        self._emit(payload)

    def emit_token(self, text: str, meta: Any = None) -> None:
        """Push a token ``{"type": "token", "text": ..., "meta": ...}`` (not journaled)."""
        self._emit({"type": "token", "text": text, "meta": meta})
