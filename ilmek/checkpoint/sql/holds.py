"""Holds stored as rows of the ``holds`` table: taking, fencing, renewing, confirming, giving back.

:class:`SqlHold` is the :class:`~ilmek.checkpoint.holds.Hold` a run of a SQL
checkpointer carries; :class:`HoldRows` runs the statements behind it. A
write that must be fenced calls :meth:`HoldRows.fence` inside its own
transaction; a first write that takes a deferred hold calls
:meth:`HoldRows.take` there.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from ... import checks, forks
from ...dbapi import Adapter, Pin, Session
from ...logs import logger
from ..holds import KEEPER, RECORD_MARGIN, Hold, busy_error, lease_clock, new_token
from .statements import Statements

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["HOLD_GONE", "JOINED_ENDED", "HoldRows", "SqlHold", "release_quietly"]

T = TypeVar("T")

_LOG = logger("ilmek.storage")

HOLD_GONE = "its hold row is gone: the thread was deleted, or its lease lapsed and another run took it"
"""Why a run's hold is lost when a fenced write or a check finds its row no longer the run's."""

JOINED_ENDED = (
    "it was taken inside your transaction, which ended (committed or rolled back) while the run went on, "
    "so nothing can keep it: commit only after the run ends, or give ilmek a pool or an engine to run in "
    "transactions of its own"
)
"""Why a hold taken inside the caller's transaction is lost once that transaction ended."""


class SqlHold(Hold):
    """A hold stored as a row of the ``holds`` table, with a lease its run renews.

    Attributes:
        pin: The connection the run keeps, through which all its reads and
            writes go (one connection of a pool per run).
        joined_in: The caller's transaction the hold was taken in (its id),
            or ``None`` for a hold taken in a transaction of ilmek's own.
            Such a hold lasts as long as that transaction: once it ended
            (committed, the row is seen by others with a lease nobody can
            renew; rolled back, the row is gone) the run is refused its
            next step and its next write (:meth:`HoldRows.within_joined`).
    """

    def __init__(
        self,
        rows: HoldRows,
        thread_id: str,
        token: str,
        pin: Pin,
        *,
        lease_seconds: float | None,
        any_thread: bool,
        confirms_each_step: bool,
        taken: bool = True,
    ) -> None:
        super().__init__(thread_id, token, lease_seconds=lease_seconds)
        self._rows = rows
        self.pin = pin
        self.any_thread = any_thread
        self.confirms_each_step = confirms_each_step
        self.taken = taken
        #: Whether a statement of this run wrote its hold row (committed or
        #: not, in ilmek's transaction or the caller's): then giving the hold
        #: back deletes the row, whoever commits the transaction.
        self.row_written = False
        self.joined_in: object | None = None
        #: What the checkpointer's ``commits_seen`` said just before the last
        #: check of the hold that found it the run's, and until when (wall
        #: clock, the database's judge on SQLite) that check saw the lease run.
        self.last_check: tuple[object, float] | None = None
        #: The thread's status and updated_at as this run's last commit left
        #: them (None until a commit of this run set them): under the hold
        #: nobody else changes them, so a move that keeps both needs not
        #: assign them.
        self.stamped: tuple[str, float] | None = None

    def take(self) -> None:
        with self.lock:
            if not self.taken:
                self._rows.take_now(self)

    def renew(self) -> None:
        super().renew()
        with self.lock:
            if self.taken:
                self._rows.renew(self)

    def must_confirm(self) -> bool:
        # A hold in the caller's transaction is checked before every step: the caller may have committed.
        return super().must_confirm() or (self.joined_in is not None and not self._released)

    def confirm(self) -> None:
        if self.lost:
            super().renew()  # raises HoldLostError
        with self.lock:
            if self.joined_in is not None:
                self._rows.confirm_joined(self)
            elif self.taken:
                self._rows.confirm(self)

    def release(self) -> None:
        if self.inherited:
            # The parent's row and the parent's connection: neither is the child's to touch.
            self._released = True
            return
        try:
            with self.lock:
                if (self.taken or self.row_written) and not self._released and not self.lost:
                    self._rows.release(self)
        finally:
            self._released = True
            # Given back whether the hold went with the final commit or here.
            self.pin.release()

    def abandon(self) -> None:
        super().abandon()
        if not self.inherited:
            # The run's workers touch no storage once it ends: the connection may go back.
            self.pin.release()


def release_quietly(hold: Hold) -> None:
    """Give ``hold`` back; a failure is logged, never raised over the run's own outcome.

    Whatever ended the run (its result, or the error it raises) is what the
    caller must see; a hold that could not be given back lapses on its own.
    """
    try:
        hold.release()
    except Exception as error:
        _LOG.warning(
            "could not give back the hold on thread %r (it lapses with its lease): %s",
            hold.thread_id,
            error,
            extra={"thread_id": hold.thread_id},
        )


class HoldRows:
    """The statements behind :class:`SqlHold`, for one checkpointer."""

    def __init__(self, owner: SqlCheckpointer, adapter: Adapter, statements: Statements) -> None:
        self._owner = owner
        self._adapter = adapter
        self._statements = statements
        #: Hold rows this process failed to delete (the database refused the
        #: release), by thread: its next take of the thread deletes them first.
        self._orphans: dict[str, str] = {}
        self._orphans_lock = forks.ForkSafeLock()
        self._orphans_generation = forks.generation()

    @contextlib.contextmanager
    def holding(self, thread_id: str, *, deferred: bool) -> Iterator[Hold]:
        """Hold ``thread_id`` for the block (taken at once unless ``deferred``), then give it back."""
        owner = self._owner
        thread_id = checks.thread_id(thread_id)
        owner.ensure_schema(thread_id)
        pin = self._adapter.pin()
        joined = self._adapter.joins
        handle = SqlHold(
            self,
            thread_id,
            new_token(),
            pin,
            # Inside the caller's transaction nobody else sees the row: the
            # advisory lock (where there is one) and the caller's write lock
            # keep the thread until the caller commits; nothing to renew.
            lease_seconds=None if joined else owner.lease_seconds,
            any_thread=owner.any_thread and not joined,
            confirms_each_step=(
                owner.CONFIRMS_EACH_STEP and not joined and not self._adapter.replaces_lost_connections
            ),
            taken=False,
        )
        try:
            if not deferred:
                self.take_now(handle)
            yield handle
        finally:
            release_quietly(handle)

    def take(self, session: Session, hold: SqlHold) -> None:
        """Inside a write: take the thread for ``hold``, or raise ThreadBusyError (rolling back)."""
        if hold.joined_in is not None:
            # Taken again by each write in the caller's transaction; never in a later one.
            self._still_joined(session, hold)
        if not self._owner.advisory_lock(session, hold.thread_id, wait=False):
            raise busy_error(hold.thread_id)
        orphan = self._orphan_of(hold.thread_id)
        if orphan is not None:
            # This process's earlier run of the thread could not give its hold back.
            session.execute(self._statements.named("release_hold"), thread_id=hold.thread_id, owner=orphan)
            session.after_commit(lambda: self._forget_orphan(hold.thread_id, orphan))
        granted = session.query(
            self._statements.named("acquire_hold"),
            thread_id=hold.thread_id,
            owner=hold.token,
            ttl=self._owner.lease_seconds,
            now=time.time(),
        )
        if not granted:
            raise busy_error(hold.thread_id)
        hold.row_written = True
        if session.joined:
            hold.joined_in = self._owner.transaction_id(session)

    def _orphan_of(self, thread_id: str) -> str | None:
        with self._orphans_lock:
            if self._orphans_generation != forks.generation():
                # A forked child's copy: those rows are the parent's to mend.
                self._orphans, self._orphans_generation = {}, forks.generation()
            return self._orphans.get(thread_id)

    def _forget_orphan(self, thread_id: str, token: str) -> None:
        with self._orphans_lock:
            if self._orphans.get(thread_id) == token:
                del self._orphans[thread_id]

    def take_now(self, hold: SqlHold) -> None:
        """Take a hold that is not taken yet, in a transaction of its own."""
        started = lease_clock()
        self._adapter.run(
            lambda session: self.take(session, hold),
            what="hold the thread",
            thread_id=hold.thread_id,
            pin=hold.pin,
        )
        self.took(hold, started)

    @staticmethod
    def took(hold: SqlHold, started: float) -> None:
        """The transaction that took ``hold`` (begun at monotonic ``started``) committed."""
        hold.mark_taken()
        hold.renewed(started)
        KEEPER.add(hold)

    def fence(self, session: Session, hold: Hold) -> str | None:
        """Inside a write: renew the hold, or fail if it is not the run's any more.

        Returns:
            A cancel request's reason, if another process stored one.
        """
        rows = session.query(
            self._statements.named("fence"),
            thread_id=hold.thread_id,
            owner=hold.token,
            ttl=self._owner.lease_seconds,
            now=time.time(),
        )
        if not rows:
            raise hold.mark_lost(HOLD_GONE)
        reason = rows[0][0]
        return reason if isinstance(reason, str) else None

    def renew(self, hold: SqlHold) -> None:
        """Extend the lease: one statement, its own transaction where the client allows it.

        On Postgres the UPDATE commits as it completes (one round trip, not a
        BEGIN, the UPDATE and a COMMIT), so the hold's row is never left
        locked by a transaction waiting on this process: a process stopped
        or killed between a renewal's statements would have kept it locked
        until its connection closed, and every other run's take of the
        thread waiting as long.
        """
        started = lease_clock()
        reason = self._owner.transact(
            lambda session: self.fence(session, hold),
            what="renew the hold",
            thread_id=hold.thread_id,
            hold=hold,
            alone=True,
        )
        hold.renewed(started, reason)

    def owns(self, session: Session, hold: Hold) -> bool:
        """Whether the hold's row still carries the run's token."""
        return bool(
            session.query(self._statements.named("holds_owner"), thread_id=hold.thread_id, owner=hold.token)
        )

    def confirm(self, hold: SqlHold) -> None:
        """A read that the hold's row still carries the run's token, with enough lease left for a record.

        With less left than :data:`~ilmek.checkpoint.holds.RECORD_MARGIN` of
        the lease (a process that slept, a machine that was suspended), the
        lease is renewed first, which fails if another run took the thread.
        Where the checkpointer can tell that no other connection committed
        since the last check (SQLite), nothing can have changed the row: while
        the lease that check saw still has the margin left, no query is made.
        """
        margin = self._owner.lease_seconds * RECORD_MARGIN
        seen = self._owner.commits_seen(hold.pin)
        last = hold.last_check
        if seen is not None and last is not None and seen == last[0] and time.time() + margin < last[1]:
            return
        rows = self._owner.transact(
            lambda session: session.query(
                self._statements.named("hold_lease_left"),
                thread_id=hold.thread_id,
                owner=hold.token,
                now=time.time(),
            ),
            what="check the hold",
            thread_id=hold.thread_id,
            write=False,
            hold=hold,
        )
        if not rows:
            raise hold.mark_lost(HOLD_GONE)
        left = rows[0][0]
        if not isinstance(left, (int, float)) or left < margin:
            self.renew(hold)
            left = self._owner.lease_seconds
        hold.last_check = None if seen is None else (seen, time.time() + left)

    def confirm_joined(self, hold: SqlHold) -> None:
        """Check that the caller's transaction the hold was taken in is still the one open.

        Raises:
            HoldLostError: it ended; the step must not run.
        """
        self._owner.transact(
            lambda session: None, what="check the hold", thread_id=hold.thread_id, write=False, hold=hold
        )

    def within_joined(self, hold: SqlHold, work: Callable[[Session], T]) -> Callable[[Session], T]:
        """``work``, refused once the caller's transaction the hold was taken in has ended."""

        def checked(session: Session) -> T:
            self._still_joined(session, hold)
            return work(session)

        return checked

    def _still_joined(self, session: Session, hold: SqlHold) -> None:
        if self._owner.transaction_id(session) != hold.joined_in:
            raise hold.mark_lost(JOINED_ENDED)

    def delete(self, session: Session, hold: Hold) -> None:
        """Inside a write: delete the hold's row (the run's last write gives it back)."""
        session.execute(self._statements.named("release_hold"), thread_id=hold.thread_id, owner=hold.token)

    def release(self, hold: SqlHold) -> None:
        """Give the hold back in a transaction of its own.

        If the database refuses (a full disk, an outage), the row is
        remembered: this checkpointer's next take of the thread deletes it,
        and until then it lapses with its lease.
        """
        try:
            self._owner.transact(
                lambda session: self.delete(session, hold),
                what="release the hold",
                thread_id=hold.thread_id,
                hold=hold,
            )
        except Exception:
            with self._orphans_lock:
                self._orphans[hold.thread_id] = hold.token
            raise

    def request_cancel(self, thread_id: str, reason: str = "cancelled") -> bool:
        """Store a cancel request on the live hold of ``thread_id``; whether there was one."""
        thread_id = checks.thread_id(thread_id)
        reason = checks.text(reason, "reason")

        def work(session: Session) -> bool:
            rows = session.query(
                self._statements.named("request_cancel"), thread_id=thread_id, reason=reason, now=time.time()
            )
            return bool(rows)

        asked: bool = self._owner.transact(work, what="request a cancel", thread_id=thread_id)
        if asked:
            _LOG.info(
                "asked the run holding thread %r to cancel: %s",
                thread_id,
                reason,
                extra={"thread_id": thread_id},
            )
        return asked
