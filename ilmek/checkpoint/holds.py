"""Holds: the right to run a thread, one run at a time, kept by one object per run.

A run takes its thread's hold before it reads anything and gives it back
when it ends. The :class:`Hold` object is passed to every write the run
makes (journal entries, checkpoints, the failure record), and each such
write is *fenced*: it lands only while the hold is still this run's. A hold
never lives in a process-wide table keyed by thread id; whoever needs it is
handed the object.

Clocks. A lease's expiry is judged where it is stored: by the database's
clock on Postgres, by the machine's wall clock on SQLite (one machine).
The holder itself counts with :func:`lease_clock` only (monotonic, and
counting a suspended machine's sleep where the system can): it renews when a
quarter of the lease has passed since the start of its last successful
fenced write, and it stops trusting the lease once three quarters have
passed without one. The database cannot judge the lease lapsed before a
whole lease after that write's start, so while the holder's clock says less
than three quarters passed, a step may start without asking the database:
the quarter left is the margin for the step's record, itself fenced.
A wall clock that jumps forward by more than a lease on a SQLite machine
can therefore let another run take a live thread; its next write then fails
rather than land.

Liveness has one rule: a hold counts until its lease expires. An ended
database session proves nothing about its holder (ilmek reconnects by
itself; servers restart, fail over and time idle sessions out; poolers
recycle server connections), so no backend takes a thread from a holder
whose lease still runs.

Renewal happens wherever the run's driver waits (it checks the deadline,
not whether its queue was idle) and, for holds whose connection may be used
from any thread, on the :class:`Keeper` thread too, so a stream whose
reader stops reading for a while keeps its hold.

A forked child never renews, confirms or gives back a hold of its parent's
(:mod:`ilmek.forks`): its copy of the hold is *inherited*, and any write
through it fails as a lost hold.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable

from .. import forks
from ..errors import ThreadBusyError
from ..logs import logger

__all__ = [
    "INHERITED",
    "RECORD_MARGIN",
    "Hold",
    "HoldLostError",
    "Keeper",
    "LocalHold",
    "LocalHolds",
    "busy_error",
    "holder_of",
    "lease_clock",
    "new_token",
]


#: Renew once this share of the lease has passed since the last renewal.
RENEW_AT = 0.25
#: Refuse to start a new step once this share has passed without a renewal.
TRUST_UNTIL = 0.75
#: The keeper may renew this share of the lease after a renewal was due.
KEEPER_LATE = 0.05
#: A step's function starts only with at least this share of the lease left,
#: so that its record can still be written under the hold.
RECORD_MARGIN = 1 - TRUST_UNTIL

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds on the clock a holder judges its own lease by (only differences mean anything).

    Monotonic; where the system offers it (Linux), it also counts the time
    the machine was suspended, which ``time.monotonic`` does not: a process
    that wakes from a suspension longer than its lease knows it must ask
    the database before it trusts its hold again.
    """
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


INHERITED = "it was inherited across os.fork(); a child never renews or gives back its parent's holds"


class HoldLostError(ThreadBusyError):
    """The run no longer holds its thread (deleted, or taken by another run); it wrote nothing more."""


def busy_error(thread_id: str) -> ThreadBusyError:
    """The error for a thread another run holds."""
    return ThreadBusyError(
        f"thread {thread_id!r} is held by another run; wait for it to return "
        "(or, if its process died, for its hold to lapse) and try again",
        thread_id=thread_id,
    )


def lost_error(thread_id: str, why: str) -> HoldLostError:
    """The error for a run whose hold is gone."""
    return HoldLostError(
        f"the run of thread {thread_id!r} lost its hold ({why}); nothing more was written. "
        "Look at the thread's latest checkpoint before running it again",
        thread_id=thread_id,
    )


_process: tuple[int, str] | None = None


def _this_process() -> str:
    """``PID@HOST`` of this process (again after a fork)."""
    global _process
    if _process is None or _process[0] != os.getpid():
        import socket

        _process = (os.getpid(), f"{os.getpid()}@{socket.gethostname()}")
    return _process[1]


def new_token() -> str:
    """A hold token no other run, process or machine will make: ``PID@HOST-RANDOM``.

    The holder's process is part of it, so an operator can tell who holds a thread.
    """
    return f"{_this_process()}-{os.urandom(9).hex()}"


def holder_of(token: object) -> str | None:
    """Which process a hold token names, as ``pid N on HOST`` (``None`` for a token of another shape)."""
    if not isinstance(token, str) or "-" not in token:
        return None
    process = token.rsplit("-", 1)[0]
    pid, _, host = process.partition("@")
    if not pid.isdigit():
        return None
    return f"pid {pid} on {host}" if host else f"pid {pid}"


class Hold:
    """One run's hold on one thread.

    Attributes:
        thread_id: The thread held.
        token: What every fenced write checks the stored hold against.
        acquired_at: When it was taken (seconds since the epoch).
        lease_seconds: How long the hold outlives its last renewal, or
            ``None`` for holds that cannot lapse while their holder lives.
        cancel_reason: The reason of a cancel request another process
            stored for this run, once a fenced write or renewal saw one.
    """

    #: Whether the hold's storage may be used from any thread: then a node's
    #: own threads record their steps directly, and the :class:`Keeper` may
    #: renew the hold from its thread. When false (a connection bound to the
    #: caller's thread), everything goes through the thread driving the run.
    any_thread: bool = False
    #: Whether a step's effect waits for the database to confirm the hold even
    #: while the lease is fresh by :func:`lease_clock`: on SQLite (the check
    #: costs no query while no other connection committed, and the wall clock
    #: that judges the lease may jump) and on a single Postgres connection
    #: (the read also proves it alive before the effect). Through a pool a
    #: fresh lease is trusted: nobody may take the thread before it lapses,
    #: and the step's record is fenced by the hold in its own statement.
    confirms_each_step: bool = False

    def __init__(self, thread_id: str, token: str, *, lease_seconds: float | None = None) -> None:
        #: Whether the hold is stored yet. A deferred hold is taken by the
        #: run's first write, in that write's own transaction.
        self.taken = True
        self.thread_id = thread_id
        self.token = token
        self.acquired_at = time.time()
        self.lease_seconds = lease_seconds
        self.cancel_reason: str | None = None
        self.on_cancel: Callable[[str], None] | None = None
        self._lost: str | None = None
        self._released = False
        self._abandoned = False
        self._renewed = lease_clock()
        self._generation = forks.generation()
        # Serializes the run's own storage work with renewals from the keeper.
        self.lock = threading.RLock()

    # --- state --------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """Whether the hold is known to be gone."""
        return self._lost is not None

    @property
    def released(self) -> bool:
        """Whether :meth:`release` ran (or the final commit gave the hold back, or it was abandoned)."""
        return self._released

    @property
    def abandoned(self) -> bool:
        """Whether the run let the hold go without giving it back (:meth:`abandon`)."""
        return self._abandoned

    @property
    def inherited(self) -> bool:
        """Whether this is a forked child's copy of its parent's hold (never to be used)."""
        return self._generation != forks.generation()

    def abandon(self) -> None:
        """Stop keeping the hold without giving it back: its row lapses when its lease ends.

        For a run that ends while one of its steps may still be acting:
        giving the thread back would let another run repeat that step beside it.
        """
        self._abandoned = True
        self._released = True

    def mark_lost(self, why: str) -> HoldLostError:
        """Remember that the hold is gone; return the error to raise."""
        if self._lost is None:
            self._lost = why
            logger("ilmek.holds").warning(
                "lost the hold on thread %r: %s", self.thread_id, why, extra={"thread_id": self.thread_id}
            )
        return lost_error(self.thread_id, self._lost)

    def renewed(self, started: float, cancel_reason: str | None = None) -> None:
        """A write that extended the lease, begun at ``started`` (:func:`lease_clock`), committed."""
        self._renewed = max(self._renewed, started)
        self.saw_cancel(cancel_reason)

    def saw_cancel(self, cancel_reason: str | None) -> None:
        """A committed write read the hold's row: act on a cancel request stored there."""
        if cancel_reason and self.cancel_reason is None:
            self.cancel_reason = cancel_reason
            logger("ilmek.holds").info(
                "cancel requested for thread %r: %s",
                self.thread_id,
                cancel_reason,
                extra={"thread_id": self.thread_id},
            )
            if self.on_cancel is not None:
                self.on_cancel(cancel_reason)

    def take(self) -> None:
        """Take a deferred hold now, in a transaction of its own.

        Raises:
            ThreadBusyError: another run holds the thread.
        """

    def mark_taken(self) -> None:
        """The write that took a deferred hold committed."""
        self.taken = True

    def mark_released(self) -> None:
        """The hold was given back (by :meth:`release` or in a final commit)."""
        self._released = True

    # --- timing -------------------------------------------------------------------

    def seconds_until_renewal(self) -> float | None:
        """How long the driver may wait before it must renew (``None``: never)."""
        if self.lease_seconds is None or self._released or self._lost is not None or not self.taken:
            return None
        return max(0.0, self._renewed + self.lease_seconds * RENEW_AT - lease_clock())

    def renewal_due(self) -> bool:
        """Whether a quarter of the lease has passed since the last renewal."""
        wait = self.seconds_until_renewal()
        return wait is not None and wait <= 0.0

    # --- what runs call ---------------------------------------------------------------

    def needs_confirmation(self) -> bool:
        """Whether too long has passed without a renewal to trust the lease without asking."""
        return (
            self.lease_seconds is not None
            and not self._released
            and lease_clock() - self._renewed > self.lease_seconds * TRUST_UNTIL
        )

    def must_confirm(self) -> bool:
        """Whether :meth:`verify` must ask the database before a step's effect."""
        return not self._released and (not self.taken or self.confirms_each_step or self.needs_confirmation())

    def verify(self) -> None:
        """Confirm the hold is still this run's, just before a step's side effect.

        Raises:
            HoldLostError: the hold is gone; the step must not run.
        """
        if self._lost is not None:
            raise lost_error(self.thread_id, self._lost)
        if self.inherited:
            raise self.mark_lost(INHERITED)
        if not self.taken:
            self.take()
        elif self.renewal_due() or self.needs_confirmation():
            # Renewing fails if another run took the thread meanwhile.
            self.renew()
        elif self.must_confirm():
            self.confirm()

    def confirm(self) -> None:
        """Check with the database that the hold is still this run's, without extending it.

        The default renews; a backend overrides it with a read, which
        writes (and waits for the disk) nothing.

        Raises:
            HoldLostError: the hold is gone.
        """
        self.renew()

    def renew_if_due(self) -> None:
        """Renew when due (the driver calls this wherever it waits)."""
        if self.renewal_due():
            self.renew()

    def renew(self) -> None:
        """Extend the hold; a backend overrides this.

        Raises:
            HoldLostError: the hold is gone.
        """
        if self._lost is not None:
            raise lost_error(self.thread_id, self._lost)
        if self.inherited:
            raise self.mark_lost(INHERITED)

    def release(self) -> None:
        """Give the thread back; safe to call twice."""
        self._released = True


class LocalHold(Hold):
    """A hold kept in one process, for backends that live in one process."""

    any_thread = True

    def __init__(self, thread_id: str, token: str, forget: Callable[[LocalHold], None]) -> None:
        super().__init__(thread_id, token)
        self._forget = forget

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._forget(self)


class LocalHolds:
    """The holds one checkpointer object keeps in its own memory, by thread id.

    The default holds of :class:`~ilmek.checkpoint.base.Checkpointer` and
    the in-memory backend's. A forked child starts with none: its parent's
    runs hold nothing of the child's copy.
    """

    def __init__(self) -> None:
        self._holds: dict[str, LocalHold] = {}
        self._generation = forks.generation()
        #: Held while reading or changing the holds (re-entrant: a caller may hold it around several).
        self.lock = forks.ForkSafeLock(threading.RLock)

    def _current(self) -> dict[str, LocalHold]:
        if self._generation != forks.generation():
            self._holds, self._generation = {}, forks.generation()
        return self._holds

    def take(self, thread_id: str) -> LocalHold:
        """A new hold on ``thread_id``.

        Raises:
            ThreadBusyError: another run of this checkpointer holds it.
        """
        with self.lock:
            holds = self._current()
            if thread_id in holds:
                raise busy_error(thread_id)
            handle = LocalHold(thread_id, new_token(), self._forget)
            holds[thread_id] = handle
            return handle

    def _forget(self, handle: LocalHold) -> None:
        with self.lock:
            holds = self._current()
            if holds.get(handle.thread_id) is handle:
                del holds[handle.thread_id]

    def holder(self, thread_id: str) -> LocalHold | None:
        """The hold on ``thread_id`` now, if any."""
        with self.lock:
            return self._current().get(thread_id)

    def drop(self, thread_id: str) -> None:
        """Forget the hold on ``thread_id`` (the thread was deleted): its run fails at its next write."""
        with self.lock:
            self._current().pop(thread_id, None)

    def check(self, hold: Hold | None) -> None:
        """The fence of writes through local holds: ``hold`` must still be the thread's.

        Raises:
            HoldLostError: it is not (the thread was deleted, or another run took it).
        """
        if hold is None:
            return
        if self.holder(hold.thread_id) is not hold:
            raise hold.mark_lost("the thread was deleted or taken by another run")


class Keeper:
    """One daemon thread that renews, on time, the holds that may be renewed from it.

    Each renewal runs on a short-lived thread of its own, so one that waits
    in the database stalls no other hold's.

    A run's driver renews its own hold whenever it runs; the keeper covers
    the time it does not (a stream whose reader has not asked for the next
    event yet, a node's long step). Holds are remembered only while
    registered, and never by thread id.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hold]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def after_fork(self) -> None:
        """In a forked child: forget the parent's holds; a new keeper thread starts with the child's first."""
        self._heap = []
        self._wake = threading.Condition()
        self._thread = None

    def add(self, hold: Hold) -> None:
        """Start renewing ``hold`` until it is released or lost."""
        if not hold.any_thread or hold.lease_seconds is None:
            return
        with self._wake:
            first = self._push(hold)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="ilmek-hold-keeper", daemon=True)
                self._thread.start()
            elif first:
                # Waking the keeper costs a thread switch on every run: only
                # when it sleeps until a later renewal than this hold's.
                self._wake.notify()

    def _push(self, hold: Hold) -> bool:
        """Schedule ``hold``'s renewal; whether it is now the first one due."""
        wait = hold.seconds_until_renewal()
        if wait is None:
            return False
        entry = (time.monotonic() + wait, next(self._order), hold)
        heapq.heappush(self._heap, entry)
        return self._heap[0] is entry

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                due, _, hold = self._heap[0]
                delay = due - time.monotonic()
                if delay > 0:
                    # A little late, so that one wake serves every renewal due
                    # by then (most are of runs already over, one per run).
                    self._wake.wait(delay + (hold.lease_seconds or 0.0) * KEEPER_LATE)
                    continue
                heapq.heappop(self._heap)
            self._tend(hold)

    def _tend(self, hold: Hold) -> None:
        """Renew ``hold`` on a thread of its own, so that a renewal blocked in the database (on a row lock,
        a slow server) delays no other hold's; the hold is scheduled again once its renewal is over."""
        if hold.released or hold.lost or hold.inherited:
            return
        try:
            threading.Thread(target=self._renew, args=(hold,), name="ilmek-hold-renewal", daemon=True).start()
        except RuntimeError:  # no new thread at interpreter shutdown: renew here
            self._renew(hold)

    def _renew(self, hold: Hold) -> None:
        if hold.lock.acquire(blocking=False):
            try:
                hold.renew_if_due()
            except Exception as error:  # the run sees the loss at its next write
                log = logger("ilmek.holds")
                log.debug("keeper could not renew the hold on %r: %s", hold.thread_id, error)
            finally:
                hold.lock.release()
        if not (hold.released or hold.lost):
            with self._wake:
                # The run's driver is using its connection: it renews itself
                # when due; look again a little later either way.
                wait = hold.seconds_until_renewal() or 0.0
                heapq.heappush(self._heap, (time.monotonic() + max(wait, 0.05), next(self._order), hold))
                self._wake.notify()


KEEPER = Keeper()
"""The process's keeper; SQL backends register their holds with it."""

forks.on_fork_in_child(KEEPER.after_fork)
