"""The context a node receives: journaled steps, interrupts, live events.

:class:`TaskJournal` is the replay memory of one task: ``ctx.step`` and
``ctx.interrupt`` look keys up in it and record what is new, persisting each
record before returning. :class:`PlanContext` is the narrower view that
guards and routers receive at plan time.
"""

from __future__ import annotations

import logging
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import InterruptSignal, NondeterminismError
from .types import JournalEntry

if TYPE_CHECKING:
    from .graph import CompiledGraph

__all__ = ["NodeContext", "PlanContext", "TaskJournal"]

T = TypeVar("T")

_LOG = logging.getLogger("ilmek.node")


class TaskJournal:
    """One task's journal during a superstep.

    Args:
        task_id: The journal's id (``<thread>:<checkpoint>:<task key>``).
        entries: What earlier passes recorded.
        persist: Stores the whole journal; called with every new record and
            must not return before the record is durable.
    """

    def __init__(
        self,
        task_id: str,
        entries: Sequence[JournalEntry],
        persist: Callable[[str, tuple[JournalEntry, ...]], None],
    ) -> None:
        self.task_id = task_id
        self._entries: dict[str, JournalEntry] = {e.key: e for e in entries}
        self._persist = persist
        #: Whether a journal is stored under this task id (so a commit must drop it).
        self.stored = False
        self._counts: dict[str, int] = {}
        self._requested: set[str] = set()
        # A node may call ctx.step from threads of its own.
        self._lock = threading.Lock()

    def begin_attempt(self) -> None:
        """Reset the per-pass key counters: the body runs again from the top."""
        self._counts.clear()
        self._requested.clear()

    def claim(self, key: str) -> str:
        """The journal key of the next use of ``key`` in this pass (``key#n``)."""
        if not isinstance(key, str) or not key:
            raise TypeError(f"journal keys are non-empty strings, got {key!r}")
        with self._lock:
            index = self._counts.get(key, 0)
            self._counts[key] = index + 1
            full = f"{key}#{index}"
            self._requested.add(full)
        return full

    def get(self, key: str) -> JournalEntry | None:
        """The entry recorded under a full key, if any."""
        return self._entries.get(key)

    def record(self, entry: JournalEntry, *, durable: bool = True) -> None:
        """Add or replace an entry; with ``durable``, persist before returning."""
        with self._lock:
            self._entries[entry.key] = entry
            snapshot = tuple(self._entries.values())
        if durable:
            self._persist(self.task_id, snapshot)
            self.stored = True

    def entries(self) -> tuple[JournalEntry, ...]:
        """Every entry, in the order first recorded."""
        return tuple(self._entries.values())

    def unrequested(self) -> list[str]:
        """Recorded keys this pass never asked for (what strict mode checks)."""
        return [key for key in self._entries if key not in self._requested]

    def open_pause(self) -> str | None:
        """A pause this pass asked for and that has no answer (a node that swallowed it)."""
        for key in self._requested:
            entry = self._entries.get(key)
            if entry is not None and entry.kind == "interrupt" and not entry.answered:
                return key
        return None

    def view(self) -> Mapping[str, JournalEntry]:
        """A read-only view of the entries by key."""
        return types.MappingProxyType(self._entries)


class PlanContext:
    """What guards and routers see: the run's identity and the state, no effects."""

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


class NodeContext(PlanContext):
    """The handle a node receives as ``ctx``.

    Attributes:
        thread_id: The thread.
        run_id: This run; a resume is a new run.
        node: The node's name.
        task_id: This task's journal id.
        step_index: The superstep counter of the superstep running.
        recursion_limit: The run's superstep budget.
        remaining_steps: How many more supersteps this run may start after
            this one.
        state: The task's state (read it; never mutate it).
        meta: What the caller passed as ``meta=``.
        cancel: The run's cancel event; pass it to long waits.
        graph: The compiled graph.
        log: A logger carrying thread, run and node.
    """

    def __init__(
        self,
        *,
        node: str,
        task_id: str,
        journal: TaskJournal,
        emit: Callable[[Any], None],
        strict: bool,
        verify: Callable[[], None] | None = None,
        **plan: Any,
    ) -> None:
        super().__init__(**plan)
        self.node = node
        self.task_id = task_id
        self._journal = journal
        self._emit = emit
        self._verify = verify
        self.strict = strict
        self.log = logging.LoggerAdapter(
            _LOG, {"thread_id": self.thread_id, "run_id": self.run_id, "node": node}
        )

    @property
    def journal(self) -> Mapping[str, JournalEntry]:
        """This task's journal, read-only (for debugging)."""
        return self._journal.view()

    def step(self, key: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once, ever, for this task.

        On a replay the recorded value is returned and ``fn`` is not called.
        Otherwise ``fn`` runs and its result is persisted before ``step``
        returns. A ``fn`` that raises records nothing. Use a key derived from
        the data inside loops: a key used again in one pass is counted
        (``charge#0``, ``charge#1``...).

        Raises:
            NondeterminismError: ``key`` names an interrupt in the journal.
            SerializationError: the result cannot be stored.
            ThreadBusyError: the run lost its hold on the thread; ``fn`` did not run.
        """
        full = self._journal.claim(key)
        entry = self._journal.get(full)
        if entry is not None:
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
        if self._verify is not None:
            # Where a hold can be lost without the writes failing, make sure
            # it is still ours before the effect rather than after.
            self._verify()
        value = fn(*args, **kwargs)
        self._journal.record(JournalEntry(key=full, kind="step", value=value))
        return value

    def interrupt(self, payload: Any = None, key: str | None = None) -> Any:
        """Pause for a person and return their answer.

        On the first pass the pause is recorded and the task halts (the run
        ends ``interrupted``); after ``resume`` the node runs again from the
        top, its completed steps replay, and this returns the answer.

        Raises:
            InterruptSignal: to halt the task; let it propagate.
            NondeterminismError: ``key`` names a step in the journal.
        """
        full = self._journal.claim("interrupt" if key is None else key)
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
                return entry.value
            raise InterruptSignal(full, entry.payload)
        # The pause itself is recorded with the pause checkpoint, not here:
        # until the superstep commits there is nothing to answer.
        self._journal.record(JournalEntry(key=full, kind="interrupt", payload=payload), durable=False)
        raise InterruptSignal(full, payload)

    def emit(self, payload: Any) -> None:
        """Push a ``custom`` event to the run's stream now (not journaled)."""
        self._emit(payload)

    def emit_token(self, text: str, meta: Any = None) -> None:
        """Push a token ``{"type": "token", "text": ..., "meta": ...}`` (not journaled)."""
        self._emit({"type": "token", "text": text, "meta": meta})
