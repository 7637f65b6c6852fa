"""Running a superstep's tasks: the worker pool, retries, and the storage work workers hand over.

Everything the run reads and writes goes through the thread that drives it
(the caller's): a worker hands its journal writes and hold checks to the
driver as a :class:`~ilmek.execution.messages.Request` and waits, so a
caller's database connection is only ever used from the caller's thread,
and a run that was abandoned can write nothing more. The driver serves
those requests, renews the hold when due and turns the other messages into
events while it waits for the tasks.

Steps are gated (:class:`_Steps`): a step's function starts only while the
run is open and holds its thread, and the runner counts the functions
running. Closing the run (a stream closed or collected, Ctrl-C, an error)
first refuses new steps, then waits for the running ones and records what
they return, and only then may the thread be given back
(:meth:`TaskRunner.close`). Where the hold can be kept without the driver,
the wait is bounded: a step still running after it records itself from its
own thread, and the thread is given back once it returns
(:meth:`TaskRunner.when_idle`). Where the hold cannot be renewed while the
driver is away (a connection bound to the caller's thread), the driver does
not hand an event to the stream's reader while a step is running: a
suspended reader can never let the lease lapse under a step whose record
is still to be written.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..context import NodeContext, StepGate
from ..errors import GraphError, StorageError
from ..events import CustomEvent, Event, NodeEnd, NodeError, NodeRetry, NodeStart
from ..logs import logger
from ..types import JournalEntry
from . import exiting
from .attempts import Attempts
from .keeping import HoldKeeper
from .messages import ChildEvent, Done, Emit, Message, Request, RunClosed, StepLeft, StorageFailed, TaskRun
from .setup import EventStamper, RunSetup

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["INLINE_IF_ONE", "SERIAL", "WORKERS", "Placement", "TaskRunner"]

Placement = str
#: A superstep of one task runs it on the driving thread; several go to the pool.
INLINE_IF_ONE: Placement = "inline-if-one"
#: Every task on the driving thread, one after another (the caller's transaction is there).
SERIAL: Placement = "serial"
#: Every task on the pool (a stream's reader sees events live; or the caller's thread is off limits).
WORKERS: Placement = "workers"


class TaskRunner:
    """Runs the tasks of a run's supersteps and serves their requests on the driving thread."""

    def __init__(self, setup: RunSetup, keeper: HoldKeeper, event: EventStamper) -> None:
        self._setup = setup
        self._keeper = keeper
        self._event = event
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        #: No new step may start (the run is ending); records of running ones still land.
        self._closing = False
        #: Nothing more is written at all.
        self._closed = False
        self._close_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._driver: int | None = None
        self._inline = False
        #: Step functions let through and not yet over (recorded, or raised).
        self._in_flight = 0
        #: How many of them run on each thread (by ident): after the run is
        #: handed over, only these may still record, from their own thread.
        self._stepping: dict[int, int] = {}
        #: The run ended with the hold kept past it: running steps record themselves.
        self._handed_over = False
        self._unrecorded = _Unrecorded(setup.thread_id)
        #: What to do once the last of them is over, after the run ended.
        self._on_idle: Callable[[], None] | None = None
        self.gate: StepGate = _Steps(self)
        self._attempts = Attempts(setup, self._queue.put)

    # --- what nodes get -----------------------------------------------------------

    def emitter(self, task_run: TaskRun) -> Callable[[Any], None]:
        """What the task's ``ctx.emit`` calls: a custom event, queued for the driver."""
        messages = self._queue

        def emit(payload: Any) -> None:
            messages.put(Emit(task_run, payload))

        return emit

    def forwarder(self, task_run: TaskRun) -> Callable[[Event, tuple[str, ...]], None]:
        """What the task's subgraphs hand their events to: queued for the driver, ``ns`` in front."""
        messages = self._queue

        def forward(event: Event, ns: tuple[str, ...]) -> None:
            messages.put(Emit(task_run, ChildEvent(event, ns)))

        return forward

    def persister(self, base_id: str, task_key: str) -> Callable[[JournalEntry], None]:
        """What the task's journal calls to record a step: an append, done by the driver."""
        cp = self._setup.checkpointer
        hold = self._keeper.hold

        def persist(entry: JournalEntry) -> None:
            self._ask_driver(self._unrecorded.kept(lambda: cp.append_journal(hold, base_id, task_key, entry)))

        return persist

    def _let_step_in(self) -> None:
        """Before a step's effect: is the run open, and the thread still ours with lease to spare?

        Where the hold cannot be kept while the driver is away, the driver
        itself lets the step in (so it is not handing events to a reader
        meanwhile, see ``_collect``); elsewhere the step is counted here.
        """
        hold = self._keeper.hold
        stepper = threading.get_ident()
        if hold.lost:
            hold.verify()
        if not hold.any_thread:
            self._ask_driver(lambda: self._admit_checked(stepper))
            return
        if hold.must_confirm():
            self._ask_driver(hold.verify)
        self._admit(stepper)

    def _admit_checked(self, stepper: int) -> None:
        self._keeper.hold.verify()
        self._admit(stepper)

    def _admit(self, stepper: int) -> None:
        with self._close_lock:
            if self._closing:
                raise RunClosed(
                    f"the run of thread {self._setup.thread_id!r} was closed; step not run",
                    thread_id=self._setup.thread_id,
                )
            self._in_flight += 1
            self._stepping[stepper] = self._stepping.get(stepper, 0) + 1

    def _step_over(self) -> None:
        stepper = threading.get_ident()
        with self._close_lock:
            self._in_flight -= 1
            left = self._stepping.pop(stepper, 1) - 1
            if left:
                self._stepping[stepper] = left
            idle = self._on_idle if self._closed and not self._in_flight else None
            if idle is not None:
                self._on_idle = None
        self._queue.put(StepLeft())
        if idle is not None:
            _give_back_quietly(self._setup.thread_id, idle)

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once no step function of the ended run is running (now, if none is)."""
        with self._close_lock:
            if self._in_flight:
                self._on_idle = callback
                return
        _give_back_quietly(self._setup.thread_id, callback)

    def steps_running(self) -> int:
        """How many step functions of the run are running now."""
        with self._close_lock:
            return self._in_flight

    # --- running a superstep's tasks ----------------------------------------------

    def run(
        self, contexts: Sequence[tuple[TaskRun, Any, NodeContext]], *, placement: Placement
    ) -> Iterator[Event]:
        """Start every task, then yield the superstep's events until every task is done."""
        self._driver = threading.get_ident()
        runs = [task_run for task_run, _, _ in contexts]
        if placement == SERIAL or (placement == INLINE_IF_ONE and self._runs_inline(runs)):
            for task_run, state, ctx in contexts:
                yield self._event(NodeStart, node=task_run.spec.name, task_id=task_run.task_id)
                self._run_inline(task_run, state, ctx)
        else:
            pool = self._workers()
            for task_run, state, ctx in contexts:
                pool.submit(self._task_body, task_run, state, ctx)
            # Every task starts now, however slowly the stream is read; what they
            # emit meanwhile waits in the queue until their node_start was yielded.
            for task_run in runs:
                yield self._event(NodeStart, node=task_run.spec.name, task_id=task_run.task_id)
        yield from self._collect(runs)

    def _run_inline(self, task_run: TaskRun, state: Any, ctx: NodeContext) -> None:
        """Run one task on the driving thread; its end goes to the queue like a worker's."""
        self._inline = True
        try:
            self._attempts.run(task_run, state, ctx)
        except Exception as error:
            task_run.outcome, task_run.error = "error", error
        finally:
            self._inline = False
        self._queue.put(Done(task_run))

    def _runs_inline(self, runs: Sequence[TaskRun]) -> bool:
        """Whether this superstep's one task may run on the driving thread (with ``INLINE_IF_ONE``).

        Only when the hold's storage may be used from any thread: the keeper
        renews the hold while the driver is busy with the node, and steps
        recorded from threads the node starts are written from those threads
        (nobody is free to serve them). A Ctrl-C in such a node stops the
        program, as on the driving thread.
        """
        return len(runs) == 1 and self._keeper.hold.any_thread

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            # Imported on first use: a run whose supersteps each have one task
            # never needs it, and ``import ilmek`` is 3 ms shorter without it.
            from concurrent.futures import ThreadPoolExecutor

            exiting.close_open_streams_before_workers_join()
            self._pool = ThreadPoolExecutor(
                max_workers=self._setup.max_workers, thread_name_prefix=f"ilmek-{self._setup.graph.name}"
            )
        return self._pool

    def _collect(self, runs: Sequence[TaskRun]) -> Iterator[Event]:
        """Serve the workers until every task is done, yielding events live.

        Where the hold is renewed only by the driver, events wait while a
        step's function runs, and go to the reader once no step is running.
        """
        remaining = len(runs)
        held_back: list[Event] = []
        renewed_elsewhere = self._keeper.hold.any_thread
        while remaining:
            try:
                message: Message | None = self._queue.get(timeout=self._keeper.seconds_until_renewal())
            except queue.Empty:
                message = None
            self._keeper.keep()
            if message is not None:
                if isinstance(message, Done):
                    remaining -= 1
                event = self._event_of(message)
                if event is not None:
                    held_back.append(event)
            if held_back and (renewed_elsewhere or not self.steps_running()):
                events, held_back = held_back, []
                yield from events
        yield from held_back

    def _event_of(self, message: Message) -> Event | None:
        """Serve a request, or turn a message into its event (None: it has none)."""
        if isinstance(message, Request):
            self._serve(message)
            return None
        if isinstance(message, StepLeft):
            return None
        if isinstance(message, Done):
            return self._finished(message.task)
        if not message.task.live:
            logger("ilmek.run").info(
                "dropped a %s from task %r, which is no longer running",
                "custom event" if isinstance(message, Emit) else "retry notice",
                message.task.task_id,
                extra={"thread_id": self._setup.thread_id},
            )
            return None
        if isinstance(message, Emit) and isinstance(message.payload, ChildEvent):
            return self._event.restamp(message.payload.event, message.payload.ns)
        if isinstance(message, Emit):
            return self._event(
                CustomEvent,
                payload=message.payload,
                node=message.task.spec.name,
                task_id=message.task.task_id,
            )
        return self._event(
            NodeRetry,
            node=message.task.spec.name,
            attempt=message.attempt,
            error=message.error,
            task_id=message.task.task_id,
        )

    def _finished(self, task_run: TaskRun) -> Event | None:
        """A task is done: its node_end or node_error event."""
        task_run.live = False
        if task_run.outcome == "ok":
            return self._event(
                NodeEnd, node=task_run.spec.name, update=task_run.update, task_id=task_run.task_id
            )
        if task_run.outcome == "error":
            return self._event(
                NodeError, node=task_run.spec.name, error=task_run.error, task_id=task_run.task_id
            )
        return None

    # --- the driver serves the workers --------------------------------------------

    def _serve(self, request: Request) -> None:
        """Do a worker's storage work on the driving thread."""
        try:
            request.work()
        except Exception as error:  # handed to the worker that asked
            request.error = error
        except BaseException:
            # Ctrl-C or SystemExit on the driving thread stops the program,
            # not just the node that happened to be waiting.
            request.error = RunClosed(
                f"the run of thread {self._setup.thread_id!r} was interrupted; step not recorded",
                thread_id=self._setup.thread_id,
            )
            request.done.set()
            raise
        request.done.set()

    def _ask_driver(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the driving thread (the only one that touches storage) and wait.

        A storage failure is the run's, not the node's: it travels as
        :class:`StorageFailed`, which the node's own handlers cannot catch.
        """
        try:
            self._on_driver(work)
        except StorageError as error:
            raise StorageFailed(error) from error

    def _on_driver(self, work: Callable[[], None]) -> None:
        on_driver = threading.get_ident() == self._driver
        if (on_driver or self._inline) and not self._closed:
            # A task running inline (on the driving thread, or on a thread it
            # started): nobody else would serve the request.
            if not on_driver and not self._keeper.hold.any_thread:
                raise GraphError(
                    f"a thread that a node of thread {self._setup.thread_id!r} started took a step while "
                    "the node ran on the caller's thread, whose connection (and transaction) is the only "
                    "one the run may write through: take steps on the node's own thread"
                )
            work()
            return
        request = Request(work)
        with self._close_lock:
            # Once the run was handed over, a step that was running records
            # itself, from its own thread; nothing else is written.
            alone = self._handed_over and threading.get_ident() in self._stepping
            if not alone:
                if self._closed:
                    raise self._closed_error()
                self._queue.put(request)
        if alone:
            work()
            return
        request.done.wait()
        if request.error is not None:
            raise request.error

    def _closed_error(self) -> RunClosed:
        return RunClosed(
            f"the run of thread {self._setup.thread_id!r} was closed; step not recorded",
            thread_id=self._setup.thread_id,
        )

    # --- on a worker (or inline): one task's attempts -----------------------------

    def _task_body(self, task_run: TaskRun, state: Any, ctx: NodeContext) -> None:
        """Runs on a worker: the node's attempts, then a ``Done`` message."""
        try:
            self._attempts.run(task_run, state, ctx)
        except BaseException as error:  # the driving thread reports it
            task_run.outcome, task_run.error = "error", error
        finally:
            self._worker_finished()
        self._queue.put(Done(task_run))

    def _worker_finished(self) -> None:
        try:
            self._setup.checkpointer.worker_finished()
        except Exception as error:  # housekeeping: never the task's outcome
            logger("ilmek.run").debug("a worker could not let go of its connections: %s", error)

    # --- the end ------------------------------------------------------------------

    def close(self, wait_seconds: float | None) -> bool:
        """End the run's tasks: no new step starts, running ones are waited for, then nothing is written.

        While it waits (at most ``wait_seconds``; ``None``: until no step
        runs) it keeps the hold and records what running steps return: those
        steps already had their effect. Tasks not started are cancelled; a
        task outside a step may go on computing, but it can write nothing
        and start no step. Where the hold can outlive the run, a step still
        running afterwards records itself from its own thread.

        Returns:
            Whether no step function is running any more (else one still
            is, and the thread must not be given back while it may act).
        """
        with self._close_lock:
            self._closing = True
        deadline = None if wait_seconds is None else time.monotonic() + wait_seconds
        stopped = True
        try:
            while True:
                self._unrecorded.write_again()
                self._serve_waiting()
                if not self.steps_running():
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    stopped = False
                    break
                self._keeper.keep()
                self._serve_next(_shorter(left, self._keeper.seconds_until_renewal()))
        finally:
            with self._close_lock:
                self._closed = True
                self._handed_over = self._keeper.can_outlive_run()
            self._serve_waiting()
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
        return stopped

    def _serve_next(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` (``None``: for ever) for the next message; serve it if it is a request."""
        try:
            message = self._queue.get(timeout=timeout)
        except queue.Empty:
            return
        if isinstance(message, Request):
            self._serve(message)

    def _serve_waiting(self) -> None:
        """Serve every request already queued (a step that finished had its effect: record it)."""
        while True:
            try:
                message = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(message, Request):
                self._serve(message)


def _give_back_quietly(thread_id: str, give_back: Callable[[], None]) -> None:
    """Give the thread back once the last step of an ended run returned; never raise into that step."""
    try:
        give_back()
    except Exception as error:
        logger("ilmek.run").warning(
            "could not give back the hold on thread %r once its last step returned (it lapses with its "
            "lease): %s",
            thread_id,
            error,
            extra={"thread_id": thread_id},
        )


class _Unrecorded:
    """Records of finished steps that a Ctrl-C interrupted: the run's end writes them again.

    The step already had its effect; dropping its record would let the next
    run of the thread repeat it.
    """

    __slots__ = ("_records", "_thread_id")

    def __init__(self, thread_id: str) -> None:
        self._thread_id = thread_id
        self._records: list[Callable[[], None]] = []

    def kept(self, record: Callable[[], None]) -> Callable[[], None]:
        """``record``, remembered for :meth:`write_again` if Ctrl-C or SystemExit interrupts it."""

        def recording() -> None:
            try:
                record()
            except Exception:
                raise
            except BaseException:
                self._records.append(record)
                raise

        return recording

    def write_again(self) -> None:
        """Write the interrupted records (on the driving thread, while the run still holds the thread)."""
        while self._records:
            record = self._records.pop(0)
            try:
                record()
            except Exception as error:
                logger("ilmek.run").warning(
                    "a step of thread %r ran, but its record could not be written after a Ctrl-C (%s); "
                    "a later run of the thread runs that step again",
                    self._thread_id,
                    error,
                    extra={"thread_id": self._thread_id},
                )


def _shorter(left: float | None, renewal: float | None) -> float | None:
    """How long the end may wait for a message: until its deadline, or its next renewal (``None``: either)."""
    if renewal is not None:
        renewal = max(renewal, 0.01)
    if left is None or renewal is None:
        return renewal if left is None else left
    return min(left, renewal)


class _Steps:
    """The run's :class:`~ilmek.context.StepGate`: lets a step in, and counts it until it is over."""

    __slots__ = ("_runner",)

    def __init__(self, runner: TaskRunner) -> None:
        self._runner = runner

    def enter(self) -> None:
        try:
            self._runner._let_step_in()
        except StorageError as error:
            raise StorageFailed(error) from error

    def leave(self) -> None:
        self._runner._step_over()
