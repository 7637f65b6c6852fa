"""InMemoryCheckpointer: the reference backend, held in this process's memory.

It stores encoded JSON exactly as the SQL backends do (through the same
delta layout), so a value that could not survive a database fails here too,
and code tested against it behaves the same on SQLite or Postgres.
"""

from __future__ import annotations

import bisect
import builtins
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .. import serde
from ..errors import CheckpointNotFoundError, ConcurrentUpdateError
from ..types import (
    ChannelChange,
    Checkpoint,
    JournalEntry,
    LazyChannels,
    ThreadInfo,
    ThreadStatus,
    thread_of_task,
    utc_now,
)
from . import _records
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
from .base import ANY_LATEST, Checkpointer, _AnyLatest, checkpoints_to_keep, concurrent_update_error

__all__ = ["InMemoryCheckpointer"]


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
    metadata_text: str
    status: ThreadStatus


@attrs.define
class _Thread:
    created_at: Any
    updated_at: Any
    metadata_text: str = "{}"
    ids: list[str] = attrs.Factory(list)
    checkpoints: dict[str, _StoredCheckpoint] = attrs.Factory(dict)
    blobs: dict[int, str] = attrs.Factory(dict)
    logs: dict[int, LogInfo] = attrs.Factory(dict)
    items: dict[int, list[str]] = attrs.Factory(dict)


class _Store:
    """The delta primitives over the dicts of :class:`InMemoryCheckpointer`."""

    def __init__(self, owner: InMemoryCheckpointer) -> None:
        self._owner = owner

    def _thread(self, thread_id: str) -> _Thread:
        return self._owner._threads[thread_id]

    def insert_blob(self, thread_id: str, channel: str, text: str) -> int:
        blob_id = self._owner._next_id()
        self._thread(thread_id).blobs[blob_id] = text
        return blob_id

    def fetch_blobs(self, thread_id: str, blob_ids: Sequence[int]) -> dict[int, Any]:
        blobs = self._thread(thread_id).blobs
        return {i: serde.decode(blobs[i]) for i in blob_ids if i in blobs}

    def create_log(self, thread_id: str, channel: str, parent_id: int | None, base: int, length: int) -> int:
        log_id = self._owner._next_id()
        thread = self._thread(thread_id)
        thread.logs[log_id] = LogInfo(log_id, parent_id, base, length)
        thread.items[log_id] = []
        return log_id

    def try_extend_log(self, thread_id: str, log_id: int, old_length: int, new_length: int) -> bool:
        logs = self._thread(thread_id).logs
        log = logs[log_id]
        if log.length != old_length:
            return False
        logs[log_id] = attrs.evolve(log, length=new_length)
        return True

    def insert_items(self, thread_id: str, log_id: int, start: int, texts: Sequence[str]) -> None:
        thread = self._thread(thread_id)
        stored = thread.items[log_id]
        assert thread.logs[log_id].base + len(stored) == start
        stored.extend(texts)

    def fetch_logs(self, thread_id: str) -> dict[int, LogInfo]:
        return dict(self._thread(thread_id).logs)

    def fetch_items(self, thread_id: str, spans: Sequence[tuple[int, int, int]]) -> dict[int, list[Any]]:
        thread = self._thread(thread_id)
        found: dict[int, list[Any]] = {}
        for log_id, start, stop in spans:
            base = thread.logs[log_id].base
            found[log_id] = [serde.decode(t) for t in thread.items[log_id][start - base : stop - base]]
        return found


class InMemoryCheckpointer(Checkpointer):
    """Checkpoints in this process's memory; gone when the process ends.

    Thread-safe. Use it in tests and scripts; use :class:`SqliteCheckpointer`
    or :class:`PostgresCheckpointer` for anything that must outlive the process.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._journals: dict[str, str] = {}
        self._journals_by_thread: dict[str, set[str]] = {}
        self._ids = 0
        self._store = _Store(self)
        self._cache = ValueCache()

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

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
        drop_journals: Sequence[str] = (),
        release_hold: bool = False,
    ) -> None:
        _records.check_thread(thread_id, checkpoint)
        with self._lock:
            thread = self._threads.get(thread_id)
            if expect_latest is not ANY_LATEST:
                found = thread.ids[-1] if thread is not None and thread.ids else None
                if found != expect_latest:
                    raise concurrent_update_error(thread_id, expect_latest, found)
            if thread is not None and checkpoint.id in thread.checkpoints:
                raise ConcurrentUpdateError(
                    f"checkpoint {checkpoint.id!r} of thread {thread_id!r} already exists; "
                    "checkpoints are never overwritten: write a new one with a new id",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint.id,
                )
            parent = None
            if thread is not None and checkpoint.parent_id is not None:
                parent = thread.checkpoints.get(checkpoint.parent_id)
            keep: set[str] | None = None
            if changes is None:
                parent_values = self._values(thread_id, parent) if parent is not None else None
                changes = diff_channels(parent_values, checkpoint.channels)
                keep = set(checkpoint.channels)
            # Encode everything before touching the store: a value that cannot
            # be stored must leave the thread as it was.
            encoded = _records.encode_changes(changes)
            stored_fields = _records.encode_fields(checkpoint)
            if thread is None:
                now = utc_now()
                thread = self._threads[thread_id] = _Thread(created_at=now, updated_at=now)
            parent_manifest = parent.manifest if parent else {}
            manifest = write_channels(self._store, thread_id, parent_manifest, encoded, keep)
            extend_cached_logs(self._cache, parent_manifest, manifest, encoded)
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
            thread.updated_at = utc_now()
            for task_id in drop_journals:
                self._drop_journal(task_id)

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
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
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return []
            ids = thread.ids
            end = len(ids) if before is None else bisect.bisect_left(ids, before)
            chosen = ids[:end][::-1]
            if limit is not None:
                chosen = chosen[: max(limit, 0)]
            return [self._checkpoint(thread_id, thread.checkpoints[i], lazy=True) for i in chosen]

    def _values(self, thread_id: str, stored: _StoredCheckpoint) -> dict[str, Any]:
        with self._lock:
            return read_channels(self._store, thread_id, stored.manifest, self._cache)

    def _checkpoint(self, thread_id: str, stored: _StoredCheckpoint, *, lazy: bool) -> Checkpoint:
        channels: Mapping[str, Any]
        if lazy:
            channels = LazyChannels(lambda: self._values(thread_id, stored))
        else:
            channels = self._values(thread_id, stored)
        return Checkpoint(
            id=stored.id,
            thread_id=thread_id,
            parent_id=stored.parent_id,
            plan_id=stored.plan_id,
            channels=channels,
            next=_records.decode_next(stored.next_text),
            pending=_records.decode_pending(stored.pending_text),
            task_journals=_records.decode_task_journals(stored.journals_text),
            step=stored.step,
            ts=stored.ts,
            metadata=serde.decode(stored.metadata_text),
        )

    # --- journals --------------------------------------------------------------------

    def put_journal(self, task_id: str, entries: Sequence[JournalEntry]) -> None:
        self.put_journals({task_id: entries})

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        encoded = {task_id: _records.encode_journal(task_id, e) for task_id, e in journals.items()}
        with self._lock:
            for task_id, text in encoded.items():
                self._journals[task_id] = text
                self._journals_by_thread.setdefault(thread_of_task(task_id), set()).add(task_id)

    def get_journal(self, task_id: str) -> tuple[JournalEntry, ...]:
        with self._lock:
            text = self._journals.get(task_id)
        return _records.decode_journal(text) if text is not None else ()

    def drop_journal(self, task_id: str) -> None:
        with self._lock:
            self._drop_journal(task_id)

    def _drop_journal(self, task_id: str) -> None:
        if self._journals.pop(task_id, None) is not None:
            self._journals_by_thread.get(thread_of_task(task_id), set()).discard(task_id)

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            self._threads.pop(thread_id, None)
            for task_id in self._journals_by_thread.pop(thread_id, set()):
                self._journals.pop(task_id, None)

    # --- host API ----------------------------------------------------------------------

    def _info(self, thread_id: str, thread: _Thread) -> ThreadInfo:
        latest = thread.checkpoints[thread.ids[-1]] if thread.ids else None
        return ThreadInfo(
            id=thread_id,
            created_at=thread.created_at,
            updated_at=thread.updated_at,
            status=latest.status if latest is not None else "done",
            step=latest.step if latest is not None else 0,
            checkpoint_id=latest.id if latest is not None else None,
            metadata=serde.decode(thread.metadata_text),
        )

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: ThreadStatus | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> builtins.list[ThreadInfo]:
        with self._lock:
            infos = [self._info(tid, thread) for tid, thread in self._threads.items()]
        if search:
            needle = search.casefold()
            infos = [i for i in infos if needle in i.id.casefold()]
        if metadata:
            infos = [i for i in infos if _records.metadata_matches(i.metadata, metadata)]
        if status is not None:
            infos = [i for i in infos if i.status == status]
        infos.sort(key=lambda i: (i.updated_at, i.id), reverse=True)
        end = None if limit is None else offset + limit
        return infos[offset:end]

    def get_thread(self, thread_id: str) -> ThreadInfo | None:
        with self._lock:
            thread = self._threads.get(thread_id)
            return self._info(thread_id, thread) if thread is not None else None

    def put_thread_metadata(self, thread_id: str, metadata: Mapping[str, Any]) -> None:
        text = _records.encode_thread_metadata(thread_id, metadata)
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                now = utc_now()
                thread = self._threads[thread_id] = _Thread(created_at=now, updated_at=now)
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
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError("offset and limit must not be negative")
        with self._lock:
            thread = self._threads.get(thread_id)
            stored = None
            if thread is not None and thread.ids:
                stored = thread.checkpoints.get(checkpoint_id or thread.ids[-1])
            if stored is None:
                raise CheckpointNotFoundError(
                    f"thread {thread_id!r} has no checkpoint {checkpoint_id or '(latest)'}",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                )
            ref = stored.manifest.get(channel)
            if ref is None:
                return []
            return read_channel_slice(self._store, thread_id, ref, offset, limit)

    def prune(self, thread_id: str, keep_last: int) -> int:
        if keep_last < 1:
            raise ValueError("keep_last must be at least 1: the latest checkpoint is always kept")
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return 0
            parents = {i: thread.checkpoints[i].parent_id for i in thread.ids}
            keep = checkpoints_to_keep(thread.ids, parents, keep_last)
            dropped = [i for i in thread.ids if i not in keep]
            for checkpoint_id in dropped:
                del thread.checkpoints[checkpoint_id]
            thread.ids = [i for i in thread.ids if i in keep]
            used = blob_ids(stored.manifest for stored in thread.checkpoints.values())
            for blob_id in builtins.list(thread.blobs):
                if blob_id not in used:
                    del thread.blobs[blob_id]
            return len(dropped)
