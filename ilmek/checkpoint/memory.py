"""InMemoryCheckpointer: the reference backend, held in this process's memory.

It stores encoded JSON exactly as the SQL backends do (through the same
delta layout and the same journal entries), so a value that could not
survive a database fails here too, and code tested against it behaves the
same on SQLite or Postgres. Holds are kept per checkpointer object.
"""

from __future__ import annotations

import bisect
import builtins
import datetime as _dt
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .. import checks
from ..crypto import Keyring, RekeyCallback, RekeyProgress
from ..errors import CheckpointNotFoundError, ConcurrentUpdateError
from ..namespaces import child_of_plans, children_prefix, is_child_thread
from ..types import (
    ChannelChange,
    Checkpoint,
    JournalEntry,
    LazyChannels,
    ThreadCancel,
    ThreadError,
    ThreadInfo,
    split_task_id,
    utc_now,
)
from . import _outcomes, _records
from ._delta import (
    ChannelRef,
    LogInfo,
    ValueCache,
    blob_ids,
    diff_channels,
    extend_cached_logs,
    read_channel_slice,
    read_channels,
    write_channels,
)
from ._rekeying import Resealer
from ._sealing import Sealer
from .base import (
    ANY_LATEST,
    Checkpointer,
    Hold,
    _AnyLatest,
    checkpoints_to_keep,
    concurrent_update_error,
    journal_view,
    missing_parent_error,
    same_channels,
)
from .child_threads import MemoryChildThreads
from .holds import LocalHolds, holder_of
from .outbox import MemoryOutbox, OutboxNotice

__all__ = ["InMemoryCheckpointer"]

_Scope = tuple[str, str, str]  # (thread, base checkpoint, task key)


@attrs.define
class _StoredCheckpoint:
    id: str
    parent_id: str | None
    plan_id: str | None
    step: int
    ts: Any
    manifest: dict[str, ChannelRef]
    next_text: str
    pending_text: str
    journals_text: str
    chain_text: str
    metadata_text: str
    status: str


@attrs.define
class _Thread:
    created_at: Any
    updated_at: Any
    metadata_text: str = "{}"
    status: str = "done"
    #: The earliest deadline or timer of the latest checkpoint's pauses (epoch seconds).
    due_at: float | None = None
    #: The last run's failure or cancel as stored text, sealed as SQL stores it (cleared by the next commit).
    outcome_text: str | None = None
    ids: list[str] = attrs.Factory(list)
    checkpoints: dict[str, _StoredCheckpoint] = attrs.Factory(dict)
    #: Stored values as ``(origin, text)``: the checkpoint that wrote each (see ``_delta.DeltaStore``).
    blobs: dict[int, tuple[str, str]] = attrs.Factory(dict)
    logs: dict[int, LogInfo] = attrs.Factory(dict)
    items: dict[int, list[tuple[str, str]]] = attrs.Factory(dict)
    #: The channel of each blob and log (what their values are sealed to), for rekey.
    channels: dict[tuple[str, int], str] = attrs.Factory(dict)
    journals: dict[tuple[str, str], dict[str, str]] = attrs.Factory(dict)


class _Store:
    """The delta primitives over the dicts of :class:`InMemoryCheckpointer`."""

    def __init__(self, owner: InMemoryCheckpointer) -> None:
        self._owner = owner
        self.sealer = owner._sealer

    def _thread(self, thread_id: str) -> _Thread:
        return self._owner._threads[thread_id]

    def insert_blob(self, thread_id: str, channel: str, origin: str, text: str) -> int:
        blob_id = self._owner._next_id()
        self._thread(thread_id).blobs[blob_id] = (origin, text)
        self._thread(thread_id).channels["b", blob_id] = channel
        return blob_id

    def fetch_blobs(self, thread_id: str, blob_ids: Sequence[int]) -> dict[int, tuple[str | None, Any]]:
        blobs = self._thread(thread_id).blobs
        return {i: blobs[i] for i in blob_ids if i in blobs}

    def create_log(self, thread_id: str, channel: str, parent_id: int | None, base: int, length: int) -> int:
        log_id = self._owner._next_id()
        thread = self._thread(thread_id)
        thread.logs[log_id] = LogInfo(log_id, parent_id, base)
        thread.channels["l", log_id] = channel
        thread.items[log_id] = []
        return log_id

    def append_items(
        self, thread_id: str, log_id: int, start: int, origin: str, texts: Sequence[str]
    ) -> bool:
        thread = self._thread(thread_id)
        log = thread.logs.get(log_id)
        if log is None or log.base + len(thread.items[log_id]) != start:
            return False
        thread.items[log_id].extend((origin, text) for text in texts)
        return True

    def insert_items(
        self, thread_id: str, log_id: int, start: int, origin: str, texts: Sequence[str]
    ) -> None:
        thread = self._thread(thread_id)
        stored = thread.items[log_id]
        assert thread.logs[log_id].base + len(stored) == start
        stored.extend((origin, text) for text in texts)

    def fetch_logs(self, thread_id: str) -> dict[int, LogInfo]:
        return dict(self._thread(thread_id).logs)

    def fetch_items(
        self, thread_id: str, spans: Sequence[tuple[int, int, int]]
    ) -> dict[int, list[tuple[int, str | None, Any]]]:
        thread = self._thread(thread_id)
        found: dict[int, list[tuple[int, str | None, Any]]] = {}
        for log_id, start, stop in spans:
            base = thread.logs[log_id].base
            stored = thread.items[log_id][start - base : stop - base]
            found[log_id] = [(start + n, origin, text) for n, (origin, text) in enumerate(stored)]
        return found


class InMemoryCheckpointer(MemoryOutbox, MemoryChildThreads, Checkpointer):
    """Checkpoints in this process's memory, gone when it ends; thread-safe. Use it in tests and scripts.

    Thread-safe. Use it in tests and scripts; use :class:`SqliteCheckpointer`
    or :class:`PostgresCheckpointer` for anything that must outlive the process.

    Args:
        cipher: An :class:`ilmek.crypto.Keyring`: values are sealed as on SQL (SPEC §7a).
    """

    def __init__(self, *, cipher: Keyring | None = None) -> None:
        super().__init__()
        self._sealer = Sealer(cipher, "ilmek")
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._ids = 0
        self._store = _Store(self)
        self._cache = ValueCache()

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _touch(self, thread_id: str) -> _Thread:
        thread = self._threads.get(thread_id)
        if thread is None:
            now = utc_now()
            thread = self._threads[thread_id] = _Thread(created_at=now, updated_at=now)
        return thread

    # --- checkpoints ----------------------------------------------------------------

    def put(self, thread_id: str, checkpoint: Checkpoint) -> None:
        self.commit(thread_id, checkpoint)

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
        thread_id = checks.thread_id(thread_id)
        _records.check_thread(thread_id, checkpoint)
        checks.checkpoint_id(checkpoint.id, "checkpoint.id")
        # Encode everything before touching the store: a value that cannot be
        # stored must leave the thread as it was.
        encoded = _records.encode_changes(changes, checkpoint, self._sealer) if changes is not None else None
        stored_fields = _records.encode_fields(checkpoint, self._sealer)
        recorded = _encode_entries(self._sealer, thread_id, journal)
        with self._lock:
            self._local_holds.check(hold)
            thread = self._threads.get(thread_id)
            existing = thread.checkpoints.get(checkpoint.id) if thread is not None else None
            if existing is not None:
                if _same_record(self._sealer, existing, checkpoint, stored_fields) and same_channels(
                    self._values(thread_id, existing), checkpoint.channels
                ):
                    return  # this very commit already landed
                raise ConcurrentUpdateError(
                    f"checkpoint {checkpoint.id!r} of thread {thread_id!r} already exists; "
                    "checkpoints are never overwritten: write a new one with a new id",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint.id,
                )
            if expect_latest is not ANY_LATEST:
                found = thread.ids[-1] if thread is not None and thread.ids else None
                if found != expect_latest:
                    raise concurrent_update_error(thread_id, expect_latest, found)
            parent = None
            if thread is not None and checkpoint.parent_id is not None:
                parent = thread.checkpoints.get(checkpoint.parent_id)
            if parent is None and checkpoint.parent_id is not None and encoded is not None:
                raise missing_parent_error(thread_id, checkpoint)
            keep: set[str] | None = None
            if encoded is None:
                parent_values = self._values(thread_id, parent) if parent is not None else None
                changed = diff_channels(parent_values, checkpoint.channels)
                encoded = _records.encode_changes(changed, checkpoint, self._sealer)
                keep = set(checkpoint.channels)
            thread = self._touch(thread_id)
            parent_manifest = parent.manifest if parent else {}
            manifest = write_channels(self._store, thread_id, parent_manifest, encoded, keep)
            extend_cached_logs(self._cache, thread_id, parent_manifest, manifest, encoded)
            stored = _StoredCheckpoint(
                id=checkpoint.id,
                parent_id=checkpoint.parent_id,
                plan_id=checkpoint.plan_id,
                step=checkpoint.step,
                ts=checkpoint.ts,
                manifest=manifest,
                status=checkpoint.status,
                **stored_fields,
            )
            bisect.insort(thread.ids, checkpoint.id)
            thread.checkpoints[checkpoint.id] = stored
            if thread.ids[-1] == checkpoint.id:
                thread.status, thread.outcome_text = checkpoint.status, None
                thread.due_at = _records.due_at(checkpoint.pending)
            thread.updated_at = utc_now()
            for task_id in drop_journals:
                self._drop_own(task_id)
            for (base_id, task_key), texts in recorded.items():
                own = thread.journals.setdefault((base_id, task_key), {})
                for entry_key, text in texts.items():
                    own.setdefault(entry_key, text)
            self.keep_notices(notices)
            if release_hold and hold is not None:
                hold.release()

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        thread_id = checks.thread_id(thread_id)
        checkpoint_id = checks.latest_or_checkpoint_id(checkpoint_id)
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or not thread.ids:
                return None
            stored = thread.checkpoints.get(checkpoint_id if checkpoint_id is not None else thread.ids[-1])
            if stored is None:
                return None
            return self._checkpoint(thread_id, stored, lazy=False)

    def list(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> builtins.list[Checkpoint]:
        thread_id = checks.thread_id(thread_id)
        limit = checks.count(limit, "limit", optional=True)
        before = checks.optional_checkpoint_id(before, "before")
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return []
            ids = thread.ids
            end = len(ids) if before is None else bisect.bisect_left(ids, before)
            chosen = ids[:end][::-1]
            if limit is not None:
                chosen = chosen[:limit]
            return [self._checkpoint(thread_id, thread.checkpoints[i], lazy=True) for i in chosen]

    def _values(self, thread_id: str, stored: _StoredCheckpoint) -> dict[str, Any]:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or thread.checkpoints.get(stored.id) is not stored:
                # Listed, then pruned or deleted before its values were read.
                raise _records.gone_error(thread_id, stored.id)
            return read_channels(self._store, thread_id, stored.manifest, self._cache)

    def _checkpoint(self, thread_id: str, stored: _StoredCheckpoint, *, lazy: bool) -> Checkpoint:
        channels: Mapping[str, Any]
        if lazy:
            channels = LazyChannels(lambda: self._values(thread_id, stored))
        else:
            channels = self._values(thread_id, stored)
        return _decoded_checkpoint(self._sealer, thread_id, stored, channels)

    # --- journals --------------------------------------------------------------------

    def _scope(self, task_id: Any) -> _Scope:
        task_id = checks.task_id(task_id)
        try:
            return split_task_id(task_id)
        except ValueError:
            # A task id of another shape is its own journal, in no thread.
            return task_id, "", ""

    def _own(self, scope: _Scope) -> builtins.list[JournalEntry]:
        thread = self._threads.get(scope[0])
        if thread is None:
            return []
        slot = _records.journal_slot(self._sealer, *scope)
        texts = thread.journals.get((scope[1], scope[2]), {}).values()
        return [
            _records.decode_entry(t, thread_id=scope[0], checkpoint_id=scope[1], slot=slot) for t in texts
        ]

    def _view(
        self, thread_id: str, base: Checkpoint | _StoredCheckpoint | None, base_id: str, key: str
    ) -> tuple[JournalEntry, ...]:
        carried: tuple[JournalEntry, ...] = ()
        chain: tuple[str, ...] = ()
        if isinstance(base, _StoredCheckpoint):
            carried, chain = _carried_and_chain(self._sealer, thread_id, base, key)
        elif isinstance(base, Checkpoint):
            carried, chain = base.task_journals.get(key, ()), base.journal_chain
        return journal_view(carried, [self._own((thread_id, source, key)) for source in (*chain, base_id)])

    def put_journal(self, task_id: str, entries: Sequence[JournalEntry]) -> None:
        self.put_journals({task_id: entries})

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        scopes = {task_id: self._scope(task_id) for task_id in journals}
        encoded = [
            (scopes[task_id], _entry_texts(self._sealer, scopes[task_id], entries, f"journal {task_id!r}"))
            for task_id, entries in journals.items()
        ]
        with self._lock:
            for scope, texts in encoded:
                self._touch_journals(scope[0])[(scope[1], scope[2])] = texts

    def _touch_journals(self, thread_id: str) -> dict[tuple[str, str], dict[str, str]]:
        thread = self._threads.get(thread_id)
        if thread is None:
            now = utc_now()
            # A journal alone does not make a listed thread: no checkpoints yet.
            thread = self._threads[thread_id] = _Thread(created_at=now, updated_at=now)
        return thread.journals

    def get_journal(self, task_id: str) -> tuple[JournalEntry, ...]:
        thread_id, base_id, key = self._scope(task_id)
        with self._lock:
            thread = self._threads.get(thread_id)
            base = thread.checkpoints.get(base_id) if thread is not None else None
            return self._view(thread_id, base, base_id, key)

    def drop_journal(self, task_id: str) -> None:
        scope = self._scope(task_id)
        with self._lock:
            self._drop_own(task_id, scope)

    def _drop_own(self, task_id: str, scope: _Scope | None = None) -> None:
        thread_id, base_id, key = scope or self._scope(task_id)
        thread = self._threads.get(thread_id)
        if thread is not None:
            thread.journals.pop((base_id, key), None)

    def load_journals(
        self, base: Checkpoint, task_keys: Sequence[str], *, hold: Hold | None = None
    ) -> dict[str, tuple[JournalEntry, ...]]:
        with self._lock:
            found = {key: self._view(base.thread_id, base, base.id, key) for key in task_keys}
        return {key: entries for key, entries in found.items() if entries}

    def append_journal(self, hold: Hold, base_id: str, task_key: str, entry: JournalEntry) -> None:
        scope = (hold.thread_id, base_id, task_key)
        text = _entry_texts(self._sealer, scope, [entry], f"task {task_key!r}")[entry.key]
        with self._lock:
            self._local_holds.check(hold)
            own = self._touch_journals(hold.thread_id).setdefault((base_id, task_key), {})
            own.setdefault(entry.key, text)

    def record_answers(
        self, hold: Hold, base_id: str, answers: Mapping[str, Sequence[JournalEntry]]
    ) -> dict[str, tuple[JournalEntry, ...]] | None:
        encoded = _encode_entries(self._sealer, hold.thread_id, (base_id, answers))
        with self._lock:
            self._local_holds.check(hold)
            journals = self._touch_journals(hold.thread_id)
            for scope, texts in encoded.items():
                journals.setdefault(scope, {}).update(texts)
        return None

    def record_failure(self, hold: Hold, error: ThreadError) -> None:
        self._record_outcome(
            hold, _outcomes.encode_thread_error(error, self._sealer, hold.thread_id), "error"
        )

    def record_cancel(self, hold: Hold, cancel: ThreadCancel) -> None:
        self._record_outcome(hold, _outcomes.encode_thread_cancel(cancel, self._sealer, hold.thread_id), None)

    def _record_outcome(self, hold: Hold, text: str, status: str | None) -> None:
        """Store the last run's failure or cancel record (a failure also sets the status)."""
        with self._lock:
            self._local_holds.check(hold)
            thread = self._threads.get(hold.thread_id)
            if thread is not None and thread.ids:
                thread.status, thread.outcome_text = status or thread.status, text
                if status == "error":  # a failed run's thread waits for no deadline
                    thread.due_at = None
                thread.updated_at = utc_now()

    def rekey(self, *, batch: int = 500, progress: RekeyCallback | None = None) -> RekeyProgress:
        checks.count(batch, "batch", minimum=1)
        resealer, done = Resealer(self._sealer), RekeyProgress()
        for thread_id in builtins.list(self._threads):
            with self._lock:  # one thread at a time: a run of another thread never waits longer
                thread = self._threads.get(thread_id)
                done = _rekey_thread(resealer, thread_id, thread, done) if thread else done
            if progress is not None:
                progress(done)
        return done

    def delete_thread(self, thread_id: str) -> None:
        thread_id = checks.thread_id(thread_id)
        with self._lock:
            # The run that held it fails at its next write.
            self.forget_notices(_drop_tree(self._threads, thread_id, self._local_holds))

    # --- host API ----------------------------------------------------------------------

    def _infos(self) -> builtins.list[ThreadInfo]:
        with self._lock, self._local_holds.lock:
            return [
                _thread_info(self._sealer, tid, thread, self._local_holds.holder(tid))
                for tid, thread in self._threads.items()
                if (thread.ids or thread.metadata_text != "{}") and not is_child_thread(tid)
            ]

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        updated_before: Any = None,
        updated_after: Any = None,
        due_before: Any = None,
    ) -> builtins.list[ThreadInfo]:
        needle = checks.search_text(search)
        wanted = _records.check_metadata_filter(metadata)
        status = checks.thread_status(status)
        offset = checks.count(offset, "offset") or 0
        limit = checks.count(limit, "limit", optional=True)
        before = checks.moment(updated_before, "updated_before")
        after = checks.moment(updated_after, "updated_after")
        due = checks.moment(due_before, "due_before")
        infos = _in_listed_order(_matching(self._infos(), needle, wanted, status, before, after), due)
        end = None if limit is None else offset + limit
        return infos[offset:end]

    def get_thread(self, thread_id: str) -> ThreadInfo | None:
        thread_id = checks.thread_id(thread_id)
        with self._lock, self._local_holds.lock:
            thread = self._threads.get(thread_id)
            if thread is None or not (thread.ids or thread.metadata_text != "{}"):
                return None
            return _thread_info(self._sealer, thread_id, thread, self._local_holds.holder(thread_id))

    def put_thread_metadata(self, thread_id: str, metadata: Mapping[str, Any]) -> None:
        thread_id = checks.thread_id(thread_id)
        text = _records.encode_thread_metadata(thread_id, metadata)
        with self._lock:
            thread = self._touch(thread_id)
            thread.metadata_text = text
            thread.updated_at = utc_now()

    def read_channel(
        self,
        thread_id: str,
        channel: str,
        offset: int = 0,
        limit: int | None = None,
        *,
        checkpoint_id: str | None = None,
    ) -> builtins.list[Any]:
        thread_id = checks.thread_id(thread_id)
        channel = checks.text(channel, "channel")
        offset = checks.count(offset, "offset") or 0
        limit = checks.count(limit, "limit", optional=True)
        checkpoint_id = checks.optional_checkpoint_id(checkpoint_id)
        with self._lock:
            ref = _stored_or_missing(self._threads.get(thread_id), thread_id, checkpoint_id).manifest.get(
                channel
            )
            if ref is None:
                return []
            return read_channel_slice(self._store, thread_id, channel, ref, offset, limit)

    def prune(self, thread_id: str, keep_last: int) -> int:
        thread_id = checks.thread_id(thread_id)
        keep_last = checks.count(keep_last, "keep_last", minimum=1) or 1
        with self.hold(thread_id), self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return 0
            parents = {i: thread.checkpoints[i].parent_id for i in thread.ids}
            keep = checkpoints_to_keep(thread.ids, parents, keep_last)
            dropped = [i for i in thread.ids if i not in keep]
            for checkpoint_id in dropped:
                del thread.checkpoints[checkpoint_id]
            thread.ids = [i for i in thread.ids if i in keep]
            _sweep(thread_id, thread)
            _drop_children(self._threads, thread_id, {thread.checkpoints[i].plan_id or i for i in thread.ids})
            return len(dropped)

    def delete_threads(
        self,
        *,
        updated_before: Any = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> int:
        before = checks.moment(updated_before, "updated_before")
        status = checks.thread_status(status)
        limit = checks.count(limit, "limit", optional=True)
        with self._lock:
            infos = [i for i in self._infos() if not i.running and _status_matches(i, status)]
            if before is not None:
                infos = [i for i in infos if i.updated_at.timestamp() < before]
            infos.sort(key=lambda i: (i.updated_at, i.id))
            chosen = infos if limit is None else infos[:limit]
            for info in chosen:
                self.forget_notices(_drop_tree(self._threads, info.id, None))
            return len(chosen)


def _drop_tree(threads: dict[str, Any], thread_id: str, holds: LocalHolds | None) -> list[str]:
    """Drop a thread, its subgraph threads and (given ``holds``) its hold; under the lock.

    Returns:
        The ids of the threads dropped (the root's and its children's).
    """
    threads.pop(thread_id, None)
    if holds is not None:
        holds.drop(thread_id)
    return [thread_id, *_drop_children(threads, thread_id, None)]


def _drop_children(threads: dict[str, Any], thread_id: str, kept_plans: set[str] | None) -> list[str]:
    """Drop the subgraph threads of ``thread_id`` (all, or those of no kept plan); under the lock.

    A child's run holds nothing once its root is gone: its next write fails
    on the missing thread, as a deleted root's does.

    Returns:
        The ids of the children dropped.
    """
    prefix = children_prefix(thread_id)
    dropped = [
        tid
        for tid in threads
        if tid.startswith(prefix) and (kept_plans is None or not child_of_plans(thread_id, tid, kept_plans))
    ]
    for child in dropped:
        threads.pop(child, None)
    return dropped


def _decoded_checkpoint(
    sealer: Sealer, thread_id: str, stored: _StoredCheckpoint, channels: Mapping[str, Any]
) -> Checkpoint:
    """The checkpoint ``stored`` holds, its stored texts decoded (and checked) beside ``channels``."""
    where = {"thread_id": thread_id, "checkpoint_id": stored.id}
    return Checkpoint(
        id=stored.id,
        thread_id=thread_id,
        parent_id=stored.parent_id,
        plan_id=stored.plan_id,
        channels=channels,
        next=_records.decode_next(stored.next_text, sealer=sealer, **where),
        pending=_records.decode_pending(stored.pending_text, sealer=sealer, **where),
        task_journals=_records.decode_task_journals(stored.journals_text, sealer=sealer, **where),
        journal_chain=_records.decode_chain(stored.chain_text, **where),
        step=stored.step,
        ts=stored.ts,
        metadata=_records.decode_metadata(stored.metadata_text, **where),
    )


def _carried_and_chain(
    sealer: Sealer, thread_id: str, stored: _StoredCheckpoint, key: str
) -> tuple[tuple[JournalEntry, ...], tuple[str, ...]]:
    """The journal a stored checkpoint carries for task ``key``, and its journal chain."""
    at = {"thread_id": thread_id, "checkpoint_id": stored.id}
    carried = _records.decode_task_journals(stored.journals_text, sealer=sealer, **at).get(key, ())
    return carried, _records.decode_chain(stored.chain_text, **at)


def _thread_info(sealer: Sealer, thread_id: str, thread: _Thread, hold: Hold | None) -> ThreadInfo:
    """What the host API shows of a thread; ``hold`` is the local hold on it, if any."""
    latest = thread.checkpoints[thread.ids[-1]] if thread.ids else None
    running = hold is not None and not hold.released
    outcome = _outcomes.decode_thread_outcome(thread.outcome_text, thread_id=thread_id, sealer=sealer)
    return ThreadInfo(
        id=thread_id,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        status=thread.status,  # type: ignore[arg-type]
        step=latest.step if latest is not None else 0,
        checkpoint_id=latest.id if latest is not None else None,
        metadata=_records.decode_metadata(thread.metadata_text, thread_id=thread_id, table="threads"),
        error=outcome if thread.status == "error" and isinstance(outcome, ThreadError) else None,
        running=running,
        held_since=_moment(hold.acquired_at) if running and hold is not None else None,
        held_by=holder_of(hold.token) if running and hold is not None else None,
        cancelled=outcome if isinstance(outcome, ThreadCancel) else None,
        due_at=_moment(thread.due_at) if thread.due_at is not None else None,
    )


def _sweep(thread_id: str, thread: _Thread) -> None:
    """After a prune, drop what only the pruned checkpoints used.

    That is the blobs no kept checkpoint's manifest names, and the journals
    whose base is neither a kept checkpoint nor in a kept one's journal chain.
    """
    used = blob_ids(stored.manifest for stored in thread.checkpoints.values())
    for blob_id in builtins.list(thread.blobs):
        if blob_id not in used:
            del thread.blobs[blob_id]
    needed = set(thread.ids)
    for stored in thread.checkpoints.values():
        needed.update(_records.decode_chain(stored.chain_text, thread_id=thread_id, checkpoint_id=stored.id))
    for scope in builtins.list(thread.journals):
        if scope[0] not in needed:
            del thread.journals[scope]


def _moment(epoch: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC)


def _in_listed_order(infos: builtins.list[ThreadInfo], due: float | None) -> builtins.list[ThreadInfo]:
    """Most recently updated first; with ``due`` (epoch seconds), only those due by then, earliest first."""
    if due is None:
        return sorted(infos, key=lambda i: (i.updated_at, i.id), reverse=True)
    due_by = [(i.due_at, i) for i in infos if i.due_at is not None and i.due_at.timestamp() <= due]
    return [i for _, i in sorted(due_by, key=lambda pair: (pair[0], pair[1].id))]


def _matching(
    infos: builtins.list[ThreadInfo],
    needle: str | None,
    wanted: Mapping[str, Any],
    status: str | None,
    before: float | None,
    after: float | None,
) -> builtins.list[ThreadInfo]:
    """The threads ``list_threads`` filters for: id search, metadata, status and update times."""
    if needle:
        folded = needle.casefold()
        infos = [i for i in infos if folded in i.id.casefold()]
    if wanted:
        infos = [i for i in infos if _records.metadata_matches(i.metadata, wanted)]
    infos = [i for i in infos if _status_matches(i, status)]
    if before is not None:
        infos = [i for i in infos if i.updated_at.timestamp() < before]
    if after is not None:
        infos = [i for i in infos if i.updated_at.timestamp() >= after]
    return infos


def _status_matches(info: ThreadInfo, status: str | None) -> bool:
    if status is None:
        return True
    if status == "running":
        return info.running
    return info.status == status


def _encode_entries(
    sealer: Sealer, thread_id: str, journal: tuple[str, Mapping[str, Sequence[JournalEntry]]] | None
) -> dict[tuple[str, str], dict[str, str]]:
    if journal is None:
        return {}
    base_id, entries = journal
    return {
        (base_id, task_key): _entry_texts(
            sealer, (thread_id, base_id, task_key), recorded, f"task {task_key!r}"
        )
        for task_key, recorded in entries.items()
    }


def _entry_texts(
    sealer: Sealer, scope: _Scope, entries: Sequence[JournalEntry], where: str
) -> dict[str, str]:
    """The stored texts of entries of the journal at ``scope`` (thread, base checkpoint, task key), by key."""
    slot = _records.journal_slot(sealer, *scope)
    return {entry.key: _records.encode_entry(entry, where, slot) for entry in entries}


def _same_record(
    sealer: Sealer, existing: _StoredCheckpoint, checkpoint: Checkpoint, fields: Mapping[str, str]
) -> bool:
    """Whether a stored checkpoint is this one (a retried commit that already landed)."""
    return (
        existing.parent_id == checkpoint.parent_id
        and existing.step == checkpoint.step
        and _records.same_plan_and_pauses(
            sealer, checkpoint, (existing.next_text, existing.pending_text), fields
        )
        and existing.metadata_text == fields["metadata_text"]
    )


def _rekey_thread(resealer: Resealer, thread_id: str, thread: _Thread, done: RekeyProgress) -> RekeyProgress:
    """Reseal every stored value of one thread under the current key; ``done`` counts them in."""
    found: builtins.list[str | tuple[str, ...] | None] = []
    for blob_id, (origin, text) in thread.blobs.items():
        channel = thread.channels["b", blob_id]
        found.append(row := resealer.channel_value(text, thread_id, channel, origin, row=f"blob {blob_id}"))
        thread.blobs[blob_id] = row or (origin, text)
    for log_id, rows in thread.items.items():
        channel = thread.channels["l", log_id]
        base = thread.logs[log_id].base
        for offset, (origin, text) in enumerate(rows):
            found.append(
                row := resealer.channel_value(
                    text, thread_id, channel, origin, index=base + offset, row=f"log {log_id}"
                )
            )
            rows[offset] = row or (origin, text)
    for (base_id, task_key), entries in thread.journals.items():
        for key, text in entries.items():
            found.append(new := resealer.entry(text, thread_id, base_id, task_key))
            entries[key] = new or text
    for stored in thread.checkpoints.values():
        parts = resealer.checkpoint_parts(
            (stored.next_text, stored.pending_text, stored.journals_text), thread_id, stored.id
        )
        found.append(parts)
        if parts is not None:
            stored.next_text, stored.pending_text, stored.journals_text = parts
    if thread.outcome_text is not None:
        found.append(new := resealer.outcome(thread.outcome_text, thread_id))
        thread.outcome_text = new or thread.outcome_text
    changed = sum(1 for item in found if item is not None)
    return attrs.evolve(
        done, checked=done.checked + len(found), rewritten=done.rewritten + changed, batches=done.batches + 1
    )


def _stored_or_missing(
    thread: _Thread | None, thread_id: str, checkpoint_id: str | None
) -> _StoredCheckpoint:
    """The stored checkpoint a read names (``None``: the latest), or ``CheckpointNotFoundError``."""
    stored = None
    if thread is not None and thread.ids:
        stored = thread.checkpoints.get(checkpoint_id or thread.ids[-1])
    if stored is None:
        raise CheckpointNotFoundError(
            f"thread {thread_id!r} has no checkpoint {checkpoint_id or '(latest)'}",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        )
    return stored
