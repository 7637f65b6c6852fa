"""The write of a superstep (or a pause, or a run's input): one checkpoint, all or nothing.

Two ways to the same rows. The one-statement way (Postgres) is one call of
the schema's superstep function, planned outside any transaction: it
applies to a new thread's first checkpoint and to supersteps whose parent
manifest this process knows. The long way is a transaction of statements:
move the thread's latest pointer (compare-and-set, fenced by the run's
hold), write the changed channels, insert the checkpoint, drop the journals
it spent and record a pause's entries, and give the hold back with the
run's last write. A retry after a lost COMMIT answer recognizes its own
earlier write and changes nothing.
"""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ... import checks, serde
from ...dbapi import Session
from ...errors import ConcurrentUpdateError
from ...types import ChannelChange, Checkpoint, JournalEntry
from .. import _records
from .._delta import (
    BlobRef,
    ChannelRef,
    LogRef,
    diff_channels,
    extend_cached_logs,
    manifest_to_plain,
    read_channels,
    write_channels,
)
from .._jsonb_order import decode_as_jsonb_reads
from .._records import EncodedChange
from ..base import ANY_LATEST, _AnyLatest, concurrent_update_error, missing_parent_error, same_channels
from ..holds import Hold, lease_clock
from ..outbox import OutboxNotice
from .calls import FunctionCall, LongWay, call_arguments, entry_rows, id_list
from .holds import HoldRows, SqlHold
from .journals import task_scope
from .notices import ADD_NOTICE, notice_params
from .reads import Reads
from .rows import epoch
from .statements import Statements

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["Supersteps"]

_NOT_CHECKED = object()
"""The cancel reason of a commit that did not check the hold in its first statement."""


class _AlreadyStored(Exception):
    """Internal: a retried write found its own earlier write; roll this one back."""


@attrs.define(eq=False)
class _Write:
    """One checkpoint's commit, encoded once before any transaction."""

    thread_id: str
    checkpoint: Checkpoint
    fields: Mapping[str, str]
    expect_latest: str | _AnyLatest | None
    hold: Hold | None
    encoded: Sequence[EncodedChange] | None
    #: (base id, task key, entry key, entry text) of a pause's entries.
    recorded: builtins.list[tuple[str, str, str, str]]
    #: (base id, task key) of the journals the superstep spent.
    drops: builtins.list[tuple[str, str]]
    release_hold: bool
    notices: Sequence[OutboxNotice] = ()
    now: float = attrs.field(factory=time.time)
    started: float = attrs.field(factory=lease_clock)
    #: Whether this is the run's first write, which takes its deferred hold.
    taking: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.taking = isinstance(self.hold, SqlHold) and not self.hold.taken

    @property
    def status(self) -> str:
        return self.checkpoint.status

    @property
    def due_at(self) -> float | None:
        return _records.due_at(self.checkpoint.pending)


class Supersteps:
    """Commits checkpoints for one SQL checkpointer."""

    def __init__(self, owner: SqlCheckpointer, statements: Statements, reads: Reads, holds: HoldRows) -> None:
        self._owner = owner
        self._statements = statements
        self._reads = reads
        self._holds = holds
        self._decode_as_read = _read_decoder(owner)

    def commit(
        self,
        thread_id: str,
        checkpoint: Checkpoint,
        *,
        changes: Mapping[str, ChannelChange] | None = None,
        expect_latest: str | _AnyLatest | None = ANY_LATEST,
        hold: Hold | None = None,
        drop_journals: Sequence[str] = (),
        journal: tuple[str, Mapping[str, Sequence[JournalEntry]]] | None = None,
        release_hold: bool = False,
        notices: Sequence[OutboxNotice] = (),
    ) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.commit`."""
        thread_id = checks.thread_id(thread_id)
        _records.check_thread(thread_id, checkpoint)
        checks.checkpoint_id(checkpoint.id, "checkpoint.id")
        sealer = self._owner.sealer
        fields = _records.encode_fields(checkpoint, sealer)
        recorded = (
            [
                (
                    journal[0],
                    task_key,
                    _records.stored_key(entry.key),
                    _records.encode_entry(
                        entry,
                        f"task {task_key!r}",
                        _records.journal_slot(sealer, thread_id, journal[0], task_key),
                    ),
                )
                for task_key, entries in journal[1].items()
                for entry in entries
            ]
            if journal is not None
            else []
        )
        write = _Write(
            thread_id=thread_id,
            checkpoint=checkpoint,
            fields=fields,
            expect_latest=expect_latest,
            hold=hold,
            encoded=_records.encode_changes(changes, checkpoint, sealer) if changes is not None else None,
            recorded=recorded,
            drops=[task_scope(task_id)[1:] for task_id in drop_journals],
            release_hold=release_hold,
            notices=notices,
        )
        # The superstep function writes no notices: a pause with some takes the long way.
        if notices or not self._in_one_call(write):
            with contextlib.suppress(_AlreadyStored):
                self._owner.transact(
                    lambda session: self._long_way(session, write),
                    what="commit a checkpoint",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint.id,
                    hold=hold,
                    takes_hold=True,
                )
        if release_hold and hold is not None:
            hold.mark_released()

    # --- the one-statement way --------------------------------------------------------

    def _in_one_call(self, write: _Write) -> bool:
        """Commit as one call of the superstep function where it applies; whether it did.

        A superstep that appends to lists this process knows, starts new
        ones and writes values (with the journals it spent or a pause's
        entries), or a new thread's first checkpoint, is one call; a fork
        that already grew a list, a list stored whole, or anything
        unexpected takes the long way.
        """
        hold, expect = write.hold, write.expect_latest
        if not (
            self._owner.WRITES_IN_ONE_STATEMENT
            and isinstance(hold, SqlHold)
            and (isinstance(expect, str) or (expect is None and write.taking))
            and write.encoded is not None
        ):
            return False
        call = self._superstep_call(write)
        if call is None:
            return False
        try:
            self._owner.transact(
                call.run,
                what="commit a checkpoint",
                thread_id=write.thread_id,
                checkpoint_id=write.checkpoint.id,
                hold=hold,
                takes_hold=True,
                alone=True,
            )
        except LongWay as way:
            if way.first_try and write.taking and isinstance(expect, str):
                # This process reads the thread until it finds it as it left it.
                self._reads.latest.missed(write.thread_id)
                raise _moved_before_first_write(write.thread_id, expect) from None
            return False
        return True

    def _superstep_call(self, write: _Write) -> FunctionCall | None:
        """A superstep's writes as one call of the superstep function, or None where it does not apply.

        It applies to a new thread's first checkpoint (no parent, no expected
        latest), and where this process knows the parent's manifest and no
        list written to is stored whole. Planned outside any transaction, so
        the call can run alone (its own transaction, one round trip).
        """
        checkpoint, hold, expect = write.checkpoint, write.hold, write.expect_latest
        assert isinstance(hold, SqlHold)
        assert write.encoded is not None
        assert not isinstance(expect, _AnyLatest)
        thread_id = checkpoint.thread_id
        parent: Mapping[str, ChannelRef] | None
        if checkpoint.parent_id is None and expect is None:
            parent = {}
        elif checkpoint.parent_id is None or expect is None:
            return None
        else:
            parent = self._reads.known_manifest(thread_id, checkpoint.parent_id)
        if parent is None or (not write.taking and hold.renewal_due()):
            return None
        plan = _CallPlan.of(parent, write.encoded)
        if plan is None:
            return None
        fields = write.fields
        call = plan.arguments(write, self._owner.advisory_key(thread_id), self._owner.lease_seconds)
        taking = write.taking

        def committed(row: tuple[Any, ...]) -> None:
            _, reason, blob_text, log_text = row
            manifest = plan.completed(id_list(blob_text), id_list(log_text))
            self._reads.remember_manifest(thread_id, checkpoint.id, manifest)
            extend_cached_logs(
                self._reads.values,
                thread_id,
                parent,
                manifest,
                write.encoded or (),
                self._decode_as_read,
            )
            self._reads.latest.committed(thread_id, checkpoint, fields, manifest, write.encoded or ())
            if taking:
                self._holds.took(hold, write.started)
            else:
                hold.saw_cancel(reason if isinstance(reason, str) else None)

        return FunctionCall(self._statements.named("superstep"), thread_id, call, committed)

    # --- the long way -----------------------------------------------------------------

    def _long_way(self, session: Session, write: _Write) -> None:
        """The commit as statements in one transaction (the work of a transact call)."""
        hold, taking = write.hold, write.taking
        if taking:
            # The run's first write takes its hold in the same transaction.
            assert isinstance(hold, SqlHold)
            self._holds.take(session, hold)
        moved, reason = self._advance_thread(session, write)
        if not moved:
            # This very commit landed before (its answer was lost). If it was
            # the run's first write too, the take above wrote the hold row
            # again: the run's last write deletes it, as the first try did.
            if write.release_hold and hold is not None:
                self._holds.delete(session, hold)
            elif taking:
                assert isinstance(hold, SqlHold)
                session.after_commit(lambda: self._holds.took(hold, write.started))
            return
        # The move checked the hold; extend its lease only when a quarter
        # of it has passed, so most supersteps leave the hold row alone.
        renewing = hold is not None and not taking and (reason is _NOT_CHECKED or hold.renewal_due())
        if renewing:
            assert hold is not None
            reason = self._holds.fence(session, hold)
        parent_manifest, manifest, to_write = self._write_channels(session, write)
        self._insert_checkpoint(session, write, manifest)
        thread_id = write.thread_id
        for base_id, task_key in write.drops:
            session.execute(
                self._statements.named("drop_task_entries"),
                thread_id=thread_id,
                base_id=base_id,
                task_key=task_key,
            )
        for base_id, task_key, entry_key, text in write.recorded:
            session.execute(
                self._statements.named("add_entry"),
                thread_id=thread_id,
                base_id=base_id,
                task_key=task_key,
                entry_key=entry_key,
                entry=text,
            )
        for notice in write.notices:
            session.execute(self._statements.built(ADD_NOTICE), **notice_params(notice))
        if write.release_hold and hold is not None:
            self._holds.delete(session, hold)

        def remember() -> None:
            self._reads.remember_manifest(thread_id, write.checkpoint.id, manifest)
            extend_cached_logs(
                self._reads.values, thread_id, parent_manifest, manifest, to_write, self._decode_as_read
            )
            self._reads.latest.committed(thread_id, write.checkpoint, write.fields, manifest, to_write)
            if taking:
                assert isinstance(hold, SqlHold)
                self._holds.took(hold, write.started)
            elif hold is not None:
                cancel_reason = reason if isinstance(reason, str) else None
                if renewing:
                    hold.renewed(write.started, cancel_reason)
                else:
                    hold.saw_cancel(cancel_reason)

        session.after_commit(remember)

    def _write_channels(
        self, session: Session, write: _Write
    ) -> tuple[dict[str, ChannelRef], dict[str, ChannelRef], Sequence[EncodedChange]]:
        """Store what changed since the parent: (parent manifest, new manifest, changes written)."""
        thread_id, checkpoint = write.thread_id, write.checkpoint
        store = self._reads.store(session)
        parent_manifest: dict[str, ChannelRef] = {}
        if checkpoint.parent_id is not None:
            # After a successful compare-and-set the thread is as this
            # process last saw it, so a manifest it remembers is current.
            known = (
                None
                if isinstance(write.expect_latest, _AnyLatest)
                else self._reads.known_manifest(thread_id, checkpoint.parent_id)
            )
            found = known or self._reads.manifest(session, thread_id, checkpoint.parent_id)
            if found is None and write.encoded is not None:
                raise missing_parent_error(thread_id, checkpoint)
            parent_manifest = found or {}
        keep: set[str] | None = None
        to_write = write.encoded
        if to_write is None:
            parent_values = self._reads.channel_values(session, thread_id, parent_manifest)
            to_write = _records.encode_changes(
                diff_channels(parent_values, checkpoint.channels), checkpoint, self._owner.sealer
            )
            keep = set(checkpoint.channels)
        manifest = write_channels(store, thread_id, parent_manifest, to_write, keep)
        return parent_manifest, manifest, to_write

    def _insert_checkpoint(self, session: Session, write: _Write, manifest: Mapping[str, ChannelRef]) -> None:
        thread_id, checkpoint, fields = write.thread_id, write.checkpoint, write.fields
        inserted = session.query(
            self._statements.named("insert_checkpoint"),
            thread_id=thread_id,
            checkpoint_id=checkpoint.id,
            parent_id=checkpoint.parent_id,
            plan_id=checkpoint.plan_id,
            step=checkpoint.step,
            ts=epoch(checkpoint.ts),
            manifest=_records.dump_plain(manifest_to_plain(dict(manifest))),
            next=fields["next_text"],
            pending=fields["pending_text"],
            task_journals=fields["journals_text"],
            journal_chain=fields["chain_text"],
            metadata=fields["metadata_text"],
        )
        if not inserted:
            if _same_stored(self, session, write):
                # A put retried after its COMMIT's answer was lost: the
                # writes above duplicated nothing that matters, so undo them.
                raise _AlreadyStored
            raise ConcurrentUpdateError(
                f"checkpoint {checkpoint.id!r} of thread {thread_id!r} already exists; "
                "checkpoints are never overwritten: write a new one with a new id",
                thread_id=thread_id,
                checkpoint_id=checkpoint.id,
            )

    def _advance_thread(self, session: Session, write: _Write) -> tuple[bool, Any]:
        """Move the thread's latest pointer.

        Returns:
            Whether it moved (False: this very commit already landed), and
            the cancel reason stored with the hold when the move checked the
            hold too (else ``_NOT_CHECKED``).
        """
        thread_id, checkpoint, hold, expect = (
            write.thread_id,
            write.checkpoint,
            write.hold,
            write.expect_latest,
        )
        params = {
            "thread_id": thread_id,
            "checkpoint_id": checkpoint.id,
            "status": write.status,
            "step": checkpoint.step,
            "now": write.now,
            "due_at": write.due_at,
        }
        named = self._statements.named
        reason: Any = _NOT_CHECKED
        if isinstance(expect, _AnyLatest):
            session.execute(named("touch_thread"), **params)
            return True, reason
        if expect is None:
            moved = session.query(named("start_thread"), **params)
        elif hold is not None:
            moved = self._advance_held(session, write, params)
            reason = moved[0][0] if moved else None
        else:
            moved = session.query(named("advance_thread"), expected=expect, **params)
        if moved:
            return True, reason
        rows = session.query(named("thread_latest"), thread_id=thread_id)
        found = rows[0][0] if rows else None
        if found == checkpoint.id and _same_stored(self, session, write):
            # A retry of a commit whose first try landed but whose answer was
            # lost with the connection: it is done already.
            return False, reason
        if hold is not None and found == expect:
            # The thread is where the run left it, so the hold is what failed.
            self._holds.fence(session, hold)
        raise concurrent_update_error(thread_id, expect, found)

    def _advance_held(self, session: Session, write: _Write, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The move fenced by the run's hold; its rows start with the hold's cancel reason."""
        hold, checkpoint = write.hold, write.checkpoint
        assert hold is not None
        stamped = hold.stamped if isinstance(hold, SqlHold) else None
        if (
            self._owner.REWRITES_ASSIGNED_INDEXES
            and stamped is not None
            and stamped[0] == write.status
            # A pause after a pause may change what is due; no other move does.
            and write.status != "interrupted"
            and not stamped[1] < write.now - 1.0
        ):
            # The statement below would keep all three: leave their index entries alone.
            return session.query(
                self._statements.named("advance_held_pointer"),
                expected=write.expect_latest,
                owner=hold.token,
                thread_id=write.thread_id,
                checkpoint_id=checkpoint.id,
                step=checkpoint.step,
            )
        moved = session.query(
            self._statements.named("advance_held_thread"),
            expected=write.expect_latest,
            owner=hold.token,
            **params,
        )
        if moved and isinstance(hold, SqlHold):
            stamp = (write.status, float(moved[0][1]))
            session.after_commit(lambda: setattr(hold, "stamped", stamp))
        return moved


@attrs.define(eq=False)
class _CallPlan:
    """The channel writes of a superstep call: items appended, lists started, values stored whole."""

    manifest: dict[str, ChannelRef]
    items: builtins.list[str] = attrs.Factory(list)
    blobs: builtins.list[str] = attrs.Factory(list)
    blob_channels: builtins.list[str] = attrs.Factory(list)
    new_logs: builtins.list[str] = attrs.Factory(list)
    new_channels: builtins.list[tuple[str, int]] = attrs.Factory(list)

    @classmethod
    def of(cls, parent: Mapping[str, ChannelRef], changes: Sequence[EncodedChange]) -> _CallPlan | None:
        """The plan of ``changes`` over ``parent``, or None where a list written to is stored whole."""
        plan = cls(manifest=dict(parent))
        for change in changes:
            if change.items is None:
                assert change.value is not None
                plan.blobs.append(f"[{_records.dump_plain(change.channel)},{change.value}]")
                plan.blob_channels.append(change.channel)
                continue
            ref = plan.manifest.get(change.channel)
            # Each item is already JSON text: the call's arrays are spliced, not re-encoded.
            # The function records the checkpoint as each row's origin, as the long way does.
            if ref is None:
                stored = change.stored_items(change.items, 0)
                plan.new_logs.append(f"[{_records.dump_plain(change.channel)},[{','.join(stored)}]]")
                plan.new_channels.append((change.channel, len(change.items)))
                continue
            if not isinstance(ref, LogRef):
                return None  # a list stored whole until now
            stored = change.stored_items(change.items, ref.length)
            plan.items.extend(f"[{ref.log_id},{ref.length + k},{text}]" for k, text in enumerate(stored))
            plan.manifest[change.channel] = LogRef(ref.log_id, ref.length + len(change.items))
        return plan

    def arguments(self, write: _Write, lock_key: int, lease_seconds: float) -> str:
        """The superstep function's arguments for ``write`` under this plan: one JSON object."""
        checkpoint, fields = write.checkpoint, write.fields
        assert isinstance(write.hold, SqlHold)
        return call_arguments(
            {
                "thread": write.thread_id,
                "owner": write.hold.token,
                "expected": write.expect_latest,
                "checkpoint": checkpoint.id,
                "status": write.status,
                "step": checkpoint.step,
                "now": write.now,
                "parent": checkpoint.parent_id,
                "plan": checkpoint.plan_id,
                "ts": epoch(checkpoint.ts),
                "release": write.release_hold,
                "take": write.taking,
                "lock_key": lock_key,
                "ttl": lease_seconds,
            },
            {
                "items": f"[{','.join(self.items)}]",
                "blobs": f"[{','.join(self.blobs)}]",
                "manifest": _records.dump_plain(self.known_part()),
                "next": fields["next_text"],
                "pending": fields["pending_text"],
                "task_journals": fields["journals_text"],
                "journal_chain": fields["chain_text"],
                "metadata": fields["metadata_text"],
                "drops": _records.dump_plain([list(drop) for drop in write.drops]),
                "entries": entry_rows(
                    ((base_id, task_key, entry_key), text)
                    for base_id, task_key, entry_key, text in write.recorded
                ),
                "new_logs": f"[{','.join(self.new_logs)}]",
            },
        )

    def known_part(self) -> dict[str, Any]:
        """The manifest as sent: the function adds the blobs' and the new lists' references itself."""
        return manifest_to_plain(
            {name: ref for name, ref in self.manifest.items() if name not in self.blob_channels}
        )

    def completed(self, blob_ids: Sequence[int], log_ids: Sequence[int]) -> dict[str, ChannelRef]:
        """The whole manifest, given the ids the function returned."""
        for channel, blob_id in zip(self.blob_channels, blob_ids, strict=True):
            self.manifest[channel] = BlobRef(blob_id)
        for (channel, length), log_id in zip(self.new_channels, log_ids, strict=True):
            self.manifest[channel] = LogRef(log_id, length)
        return self.manifest


def _read_decoder(owner: SqlCheckpointer) -> Callable[[str], Any]:
    """How a value this process wrote is decoded so that it reads as a read from the store gives it.

    Unsealed on Postgres a value is ``jsonb``, which gives a dict's keys back in
    an order of its own; sealed, it is its text inside the seal.
    """
    return decode_as_jsonb_reads if owner.STORES_JSONB and owner.sealer.cipher is None else serde.decode


def _moved_before_first_write(thread_id: str, expect: str) -> ConcurrentUpdateError:
    """A run's first write, conditioned on where it saw the thread, was sent once and rolled back.

    Nothing was written, and the thread is elsewhere (or a list outgrew that
    checkpoint): the run reads the thread and tries again, at one round trip
    instead of the long way's several.
    """
    return ConcurrentUpdateError(
        f"thread {thread_id!r} moved on from checkpoint {expect!r} before this run's first write; "
        "nothing was written. Read the thread again and retry",
        thread_id=thread_id,
        checkpoint_id=None,
    )


def _same_stored(supersteps: Supersteps, session: Session, write: _Write) -> bool:
    """Whether the checkpoint stored under this id is this very write (a retry meeting itself)."""
    thread_id, checkpoint, fields = write.thread_id, write.checkpoint, write.fields
    rows = session.query(
        supersteps._statements.named("stored_fields"), thread_id=thread_id, checkpoint_id=checkpoint.id
    )
    if not rows:
        return False
    parent_id, step, next_text, pending_text, metadata_text = rows[0]
    where = {"thread_id": thread_id, "checkpoint_id": checkpoint.id}
    if not (
        parent_id == checkpoint.parent_id
        and step == checkpoint.step
        and _records.same_plan_and_pauses(
            supersteps._owner.sealer, checkpoint, (next_text, pending_text), fields
        )
        and _records.load_plain(metadata_text, **where) == _records.load_plain(fields["metadata_text"])
    ):
        return False
    manifest = supersteps._reads.manifest(session, thread_id, checkpoint.id) or {}
    stored = read_channels(supersteps._reads.store(session), thread_id, manifest, None)
    return same_channels(stored, checkpoint.channels)
