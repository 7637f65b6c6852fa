"""Journal rows: one per recorded step or answer, keyed by thread, base checkpoint, task and key.

A run appends a step's row the moment it completes (fenced by its hold); a
resume records its answers all at once, and only on a pause nothing else
was recorded from since the resume read it; a failed run stores why. The
port's ``put_journal``/``get_journal``/``drop_journal`` work on the same
rows, by task id.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ... import checks
from ...dbapi import Session
from ...errors import ConcurrentUpdateError
from ...types import Checkpoint, JournalEntry, ThreadCancel, ThreadError, split_task_id
from .. import _outcomes, _records
from .._sealing import Sealer
from ..base import concurrent_update_error, journal_view
from ..holds import Hold, lease_clock
from .calls import FunctionCall, LongWay, call_arguments, entry_rows
from .holds import HoldRows, SqlHold
from .statements import Statements, chunks

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["Journals", "answered_meanwhile_error", "task_scope"]


def task_scope(task_id: Any) -> tuple[str, str, str]:
    """(thread, base checkpoint, task key) of a task id; an id of another shape is its own thread."""
    task_id = checks.task_id(task_id)
    try:
        return split_task_id(task_id)
    except ValueError:
        return task_id, "", ""


def answered_meanwhile_error(thread_id: str, base_id: str) -> ConcurrentUpdateError:
    """The error for answers whose pause another resume answered, or acted on, after this one read it."""
    return ConcurrentUpdateError(
        f"pause checkpoint {base_id!r} of thread {thread_id!r} was answered or acted on by another "
        "resume after this one read it; nothing was written. Read the thread again and resume "
        "with the answer it holds",
        thread_id=thread_id,
        checkpoint_id=base_id,
    )


class Journals:
    """The journal rows of one SQL checkpointer."""

    def __init__(self, owner: SqlCheckpointer, statements: Statements, holds: HoldRows) -> None:
        self._owner = owner
        self._statements = statements
        self._holds = holds

    # --- what a run reads -------------------------------------------------------------

    def entries(
        self, session: Session, thread_id: str, bases: Sequence[str], task_key: str | None = None
    ) -> dict[tuple[str, str], builtins.list[JournalEntry]]:
        """Entries recorded from the given base checkpoints, by (base, task key), in order.

        Raises:
            CorruptCheckpointError: a base id (from a stored journal chain) that no text
                column can hold, so it cannot be sent back as a parameter.
        """
        for base_id in bases:
            if not checks.is_plain_text(base_id):
                raise _records.corrupt(
                    f"its journal chain names {base_id!r}, which no checkpoint id can be",
                    thread_id=thread_id,
                    checkpoint_id=bases[-1],
                )
        found: dict[tuple[str, str], builtins.list[JournalEntry]] = {}
        task_condition = " AND task_key = :task_key" if task_key is not None else ""
        for chunk in chunks(bases):
            template = (
                "SELECT base_id, task_key, {jo_entry} FROM {p}_journals WHERE thread_id = :thread_id "
                f"AND base_id IN ({{in}}){task_condition} ORDER BY entry_id"
            )
            params = {"thread_id": thread_id, **self._statements.in_params(chunk)}
            if task_key is not None:
                params["task_key"] = task_key
            for base_id, key, stored in session.query(self._statements.built(template, len(chunk)), **params):
                slot = _records.journal_slot(self._owner.sealer, thread_id, base_id, key)
                entry = _records.decode_entry(stored, thread_id=thread_id, checkpoint_id=base_id, slot=slot)
                found.setdefault((base_id, key), []).append(entry)
        return found

    def load_journals(
        self, base: Checkpoint, task_keys: Sequence[str], *, hold: Hold | None = None
    ) -> dict[str, tuple[JournalEntry, ...]]:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.load_journals`."""
        sources = [*base.journal_chain, base.id]
        thread_id = base.thread_id
        stored = self._owner.transact(
            lambda session: self.entries(session, thread_id, sources),
            what="read journals",
            thread_id=thread_id,
            write=False,
            hold=hold,
        )
        found = {}
        for key in task_keys:
            entries = journal_view(
                base.task_journals.get(key, ()), [stored.get((source, key), ()) for source in sources]
            )
            if entries:
                found[key] = entries
        return found

    # --- what a run writes ------------------------------------------------------------

    def append_journal(self, hold: Hold, base_id: str, task_key: str, entry: JournalEntry) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.append_journal`."""
        thread_id = hold.thread_id
        slot = _records.journal_slot(self._owner.sealer, thread_id, base_id, task_key)
        text = _records.encode_entry(entry, f"task {task_key!r}", slot)
        if hold.renewal_due() and self._owner.WRITES_IN_ONE_STATEMENT:
            # On Postgres the renewal goes first, as a statement of its own in
            # autocommit, not in a transaction with the insert: such a
            # transaction spans round trips, with the hold's row locked, and a
            # process stopped between them would keep every other run's take
            # of the thread waiting. (Two statements are fewer round trips
            # than BEGIN, two statements and COMMIT, too.)
            hold.renew()
        started = lease_clock()
        renew = hold.renewal_due()

        def work(session: Session) -> str | None:
            reason = self._holds.fence(session, hold) if renew else None
            inserted = session.query(
                self._statements.named("append_entry"),
                thread_id=thread_id,
                base_id=base_id,
                task_key=task_key,
                entry_key=_records.stored_key(entry.key),
                entry=text,
                owner=hold.token,
            )
            if not inserted and not self._holds.owns(session, hold):
                raise hold.mark_lost("its hold row is gone: the thread was deleted, or another run took it")
            if renew:
                session.after_commit(lambda: hold.renewed(started, reason))
            return reason

        # Without a renewal it is one insert (and, only when it inserted
        # nothing, a read of why), so it may be a transaction by itself.
        self._owner.transact(work, what="record a step", thread_id=thread_id, hold=hold, alone=not renew)

    def record_answers(
        self, hold: Hold, base_id: str, answers: Mapping[str, Sequence[JournalEntry]]
    ) -> dict[str, tuple[JournalEntry, ...]]:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.record_answers`."""
        thread_id = hold.thread_id
        sealer = self._owner.sealer
        encoded = [
            (
                key,
                _records.stored_key(entry.key),
                _records.encode_entry(
                    entry, f"task {key!r}", _records.journal_slot(sealer, thread_id, base_id, key)
                ),
            )
            for key, entries in answers.items()
            for entry in entries
        ]
        started = lease_clock()
        taking = isinstance(hold, SqlHold) and not hold.taken
        if self._owner.WRITES_IN_ONE_STATEMENT and isinstance(hold, SqlHold):
            # One call of the database's answer function, or the long way
            # below when the call finds anything unexpected.
            returned: builtins.list[Any] = []
            call = self._answer_call(hold, base_id, encoded, taking=taking, started=started, into=returned)
            try:
                self._owner.transact(
                    call.run,
                    what="record the answers",
                    thread_id=thread_id,
                    hold=hold,
                    takes_hold=True,
                    alone=True,
                )
            except LongWay:
                pass
            else:
                return _recorded_journals(
                    returned, thread_id=thread_id, base_id=base_id, sealer=self._owner.sealer
                )

        rows = self._owner.transact(
            lambda session: self._answer_long_way(session, hold, base_id, encoded, taking, started),
            what="record the answers",
            thread_id=thread_id,
            hold=hold,
            takes_hold=True,
        )
        return _recorded_journals(
            [(task_key, entry) for task_key, _entry_key, entry in rows],
            thread_id=thread_id,
            base_id=base_id,
            sealer=self._owner.sealer,
        )

    def _answer_long_way(
        self,
        session: Session,
        hold: Hold,
        base_id: str,
        encoded: Sequence[tuple[str, str, str]],
        taking: bool,
        started: float,
    ) -> builtins.list[tuple[Any, ...]]:
        """The answers as statements in one transaction; returns what is then recorded from the pause."""
        thread_id = hold.thread_id
        named = self._statements.named
        if taking:
            # A resume's first write takes its hold in the same transaction;
            # it read the pause without the hold, so the pause must still
            # be the thread's latest checkpoint.
            assert isinstance(hold, SqlHold)
            self._holds.take(session, hold)
            rows = session.query(named("thread_latest"), thread_id=thread_id)
            found = rows[0][0] if rows else None
            if found != base_id:
                raise concurrent_update_error(thread_id, base_id, found)
            # Nor may anything have been recorded from it since: another
            # resume's answer, or a step that acted on it. The run judged
            # its answers by what it read; under the hold it reads again.
            recorded = session.query(named("base_entries"), thread_id=thread_id, base_id=base_id)
            if not _only_these(
                recorded, encoded, thread_id=thread_id, base_id=base_id, sealer=self._owner.sealer
            ):
                raise answered_meanwhile_error(thread_id, base_id)
            session.after_commit(lambda: self._holds.took(hold, started))
        else:
            reason = self._holds.fence(session, hold)
            session.after_commit(lambda: hold.renewed(started, reason))
        for task_key, entry_key, text in encoded:
            session.execute(
                named("put_entry"),
                thread_id=thread_id,
                base_id=base_id,
                task_key=task_key,
                entry_key=entry_key,
                entry=text,
            )
        return session.query(named("base_entries"), thread_id=thread_id, base_id=base_id)

    def _answer_call(
        self,
        hold: SqlHold,
        base_id: str,
        encoded: Sequence[tuple[str, str, str]],
        *,
        taking: bool,
        started: float,
        into: builtins.list[Any],
    ) -> FunctionCall:
        """A resume's answers as one call of the answer function (see record_answers).

        Once it committed, ``into`` holds what is recorded from ``base_id``
        as the function returned it: [task key, entry] pairs, in order.
        """
        # One entry per key, the last one given, as the long way's upserts leave it.
        entries = {(task_key, entry_key): text for task_key, entry_key, text in encoded}
        call = call_arguments(
            {
                "thread": hold.thread_id,
                "owner": hold.token,
                "base": base_id,
                "take": taking,
                "lock_key": self._owner.advisory_key(hold.thread_id),
                "ttl": self._owner.lease_seconds,
            },
            {"entries": entry_rows(entries.items())},
        )

        def committed(row: tuple[Any, ...]) -> None:
            if taking:
                self._holds.took(hold, started)
            else:
                reason = row[1]
                hold.renewed(started, reason if isinstance(reason, str) else None)
            into.extend(
                _records.load_plain(row[2], thread_id=hold.thread_id, checkpoint_id=base_id, table="journals")
            )

        return FunctionCall(self._statements.named("answer"), hold.thread_id, call, committed)

    def record_failure(self, hold: Hold, error: ThreadError) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.record_failure`."""
        text = _outcomes.encode_thread_error(error, self._owner.sealer, hold.thread_id)

        def work(session: Session) -> None:
            self._holds.fence(session, hold)
            session.execute(
                self._statements.named("record_failure"),
                thread_id=hold.thread_id,
                error=text,
                now=time.time(),
            )

        self._owner.transact(work, what="record the failure", thread_id=hold.thread_id, hold=hold)

    def record_cancel(self, hold: Hold, cancel: ThreadCancel) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.record_cancel`."""
        text = _outcomes.encode_thread_cancel(cancel, self._owner.sealer, hold.thread_id)

        def work(session: Session) -> None:
            self._holds.fence(session, hold)
            session.execute(
                self._statements.named("record_cancel"), thread_id=hold.thread_id, error=text, now=time.time()
            )

        self._owner.transact(work, what="record the cancel", thread_id=hold.thread_id, hold=hold)

    # --- the port's journals, by task id ----------------------------------------------

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.put_journals`."""
        encoded = []
        for task_id, entries in journals.items():
            scope = task_scope(task_id)
            slot = _records.journal_slot(self._owner.sealer, *scope)
            rows = [
                (_records.stored_key(entry.key), _records.encode_entry(entry, f"journal {task_id!r}", slot))
                for entry in entries
            ]
            encoded.append((scope, rows))
        if not encoded:
            return
        named = self._statements.named

        def work(session: Session) -> None:
            for (thread_id, base_id, task_key), rows in encoded:
                session.execute(
                    named("drop_task_entries"), thread_id=thread_id, base_id=base_id, task_key=task_key
                )
                for entry_key, text in rows:
                    session.execute(
                        named("put_entry"),
                        thread_id=thread_id,
                        base_id=base_id,
                        task_key=task_key,
                        entry_key=entry_key,
                        entry=text,
                    )

        self._owner.transact(work, what="record a journal", thread_id=encoded[0][0][0])

    def get_journals(self, task_ids: Sequence[str]) -> dict[str, tuple[JournalEntry, ...]]:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.get_journals`."""
        scopes = {task_id: task_scope(task_id) for task_id in task_ids}
        if not scopes:
            return {}

        def work(session: Session) -> dict[str, tuple[JournalEntry, ...]]:
            found: dict[str, tuple[JournalEntry, ...]] = {}
            for task_id, (thread_id, base_id, task_key) in scopes.items():
                rows = session.query(
                    self._statements.named("checkpoint"), thread_id=thread_id, checkpoint_id=base_id
                )
                carried: tuple[JournalEntry, ...] = ()
                sources = [base_id]
                if rows:
                    where = {"thread_id": thread_id, "checkpoint_id": base_id}
                    carried = _records.decode_task_journals(
                        rows[0][8], sealer=self._owner.sealer, **where
                    ).get(task_key, ())
                    sources = [*_records.decode_chain(rows[0][9], **where), base_id]
                stored = self.entries(session, thread_id, sources, task_key)
                entries = journal_view(carried, [stored.get((source, task_key), ()) for source in sources])
                if entries:
                    found[task_id] = entries
            return found

        first_thread = next(iter(scopes.values()))[0]
        result: dict[str, tuple[JournalEntry, ...]] = self._owner.transact(
            work, what="read journals", thread_id=first_thread, write=False
        )
        return result

    def drop_journal(self, task_id: str) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.drop_journal`."""
        thread_id, base_id, task_key = task_scope(task_id)
        self._owner.transact(
            lambda session: session.execute(
                self._statements.named("drop_task_entries"),
                thread_id=thread_id,
                base_id=base_id,
                task_key=task_key,
            ),
            what="drop a journal",
            thread_id=thread_id,
        )


def _only_these(
    recorded: Iterable[Sequence[Any]],
    encoded: Sequence[tuple[str, str, str]],
    *,
    thread_id: str,
    base_id: str,
    sealer: Sealer,
) -> bool:
    """Whether the rows recorded from a pause are, at most, the answers about to be written.

    ``recorded`` holds (task key, entry key, entry) rows as read; ``encoded``
    the answers as (task key, entry key, entry text). A retried write meets
    its own answers; anything else (another answer, a step's record) means
    another resume got there first.
    """
    mine = {(task_key, entry_key): text for task_key, entry_key, text in encoded}
    for task_key, entry_key, stored in recorded:
        text = mine.get((task_key, entry_key))
        if text is None:
            return False
        if sealer.cipher is not None:
            # Sealed texts differ on every write (a fresh nonce): compare what they hold.
            slot = _records.journal_slot(sealer, thread_id, base_id, task_key)
            opened = [
                _records.decode_entry(found, thread_id=thread_id, checkpoint_id=base_id, slot=slot)
                for found in (stored, text)
            ]
            if opened[0] != opened[1]:
                return False
        elif not _records.json_equal(
            _records.load_plain(stored, thread_id=thread_id, checkpoint_id=base_id, table="journals"),
            _records.load_plain(text),
        ):
            return False
    return True


def _recorded_journals(
    pairs: Iterable[Sequence[Any]], *, thread_id: str, base_id: str, sealer: Sealer
) -> dict[str, tuple[JournalEntry, ...]]:
    """(task key, stored entry) pairs, in the order recorded, as entries by task key.

    Decoded as a read decodes them, so a run sees what a later replay sees.
    """
    found: dict[str, builtins.list[JournalEntry]] = {}
    for pair in pairs:
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise _records.corrupt(
                f"a recorded journal row came back as {type(pair).__name__}",
                thread_id=thread_id,
                checkpoint_id=base_id,
                table="journals",
            )
        task_key, stored = pair
        slot = _records.journal_slot(sealer, thread_id, base_id, str(task_key))
        entry = _records.decode_entry(stored, thread_id=thread_id, checkpoint_id=base_id, slot=slot)
        found.setdefault(str(task_key), []).append(entry)
    return {key: tuple(entries) for key, entries in found.items()}
