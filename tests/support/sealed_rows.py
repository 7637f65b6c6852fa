"""Stored rows of a sealed store, read and rewritten behind ilmek's back (a writer with database access).

:class:`StoredRows` gives the same few operations on every backend the
sealed tests run on: SQL on a real SQLite file or Postgres database, and on
the memory reference its dicts (white-box, as a stand-in for the rows). A
value is handed around as stored (parsed JSON), so a test copies exactly
what an attacker would copy: the value column, not the identity beside it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from ilmek import Checkpointer
from tests.support.backends import Backend, MemoryBackend
from tests.support.sealed import raw_sql


def _parsed(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class StoredRows:
    """The blobs, list items and journal entries of one store, by SQL or (memory) by its dicts."""

    def __init__(self, backend: Backend, execute: Any, prefix: str = "ilmek") -> None:
        self._backend = backend
        self._execute = execute
        self._prefix = prefix

    def _memory_thread(self, thread_id: str) -> Any:
        assert isinstance(self._backend, MemoryBackend)
        assert self._backend.shared is not None
        return self._backend.shared._threads[thread_id]  # type: ignore[attr-defined]

    def blobs(self, thread_id: str, channel: str) -> list[tuple[int, Any]]:
        """``(blob_id, stored value)`` of a channel's whole values, oldest first."""
        if self._execute is None:
            thread = self._memory_thread(thread_id)
            return [
                (blob_id, _parsed(_text(stored)))
                for blob_id, stored in sorted(thread.blobs.items())
                if thread.channels["b", blob_id] == channel
            ]
        rows = self._execute(
            f"SELECT blob_id, value FROM {self._prefix}_blobs WHERE thread_id = ? AND channel = ? "
            "ORDER BY blob_id",
            thread_id,
            channel,
        )
        return [(int(blob_id), _parsed(value)) for blob_id, value in rows]

    def set_blob(self, thread_id: str, blob_id: int, value: Any) -> None:
        """Overwrite one blob's stored value, leaving its id and every other column as they are."""
        if self._execute is None:
            thread = self._memory_thread(thread_id)
            thread.blobs[blob_id] = _with_text(thread.blobs[blob_id], json.dumps(value))
            return
        changed = self._execute(
            f"UPDATE {self._prefix}_blobs SET value = ? WHERE blob_id = ? RETURNING blob_id",
            json.dumps(value),
            blob_id,
        )
        assert changed

    def items(self, thread_id: str, channel: str) -> list[tuple[int, int, Any]]:
        """``(log_id, index, stored value)`` of a list channel's items, by log then index."""
        if self._execute is None:
            thread = self._memory_thread(thread_id)
            found = []
            for log_id, stored in sorted(thread.items.items()):
                if thread.channels["l", log_id] == channel:
                    base = thread.logs[log_id].base
                    found.extend((log_id, base + n, _parsed(_text(item))) for n, item in enumerate(stored))
            return found
        rows = self._execute(
            f"SELECT i.log_id, i.idx, i.value FROM {self._prefix}_items AS i "
            f"JOIN {self._prefix}_logs AS l ON l.log_id = i.log_id "
            "WHERE l.thread_id = ? AND l.channel = ? ORDER BY i.log_id, i.idx",
            thread_id,
            channel,
        )
        return [(int(log_id), int(idx), _parsed(value)) for log_id, idx, value in rows]

    def set_item(self, thread_id: str, log_id: int, index: int, value: Any) -> None:
        """Overwrite one list item's stored value, leaving its log, index and other columns alone."""
        if self._execute is None:
            thread = self._memory_thread(thread_id)
            stored = thread.items[log_id]
            offset = index - thread.logs[log_id].base
            stored[offset] = _with_text(stored[offset], json.dumps(value))
            return
        changed = self._execute(
            f"UPDATE {self._prefix}_items SET value = ? WHERE log_id = ? AND idx = ? RETURNING idx",
            json.dumps(value),
            log_id,
            index,
        )
        assert changed

    def entries(self, thread_id: str) -> list[tuple[str, str, Any]]:
        """``(base checkpoint id, key, parsed entry)`` of every journal entry of the thread."""
        if self._execute is None:
            thread = self._memory_thread(thread_id)
            # The reference keys its entries by the key itself (SQL: its JSON-escaped form).
            return [
                (base, key, _parsed(text))
                for (base, _), entries in thread.journals.items()
                for key, text in entries.items()
            ]
        rows = self._execute(
            f"SELECT base_id, entry_key, entry FROM {self._prefix}_journals WHERE thread_id = ?", thread_id
        )
        return [(base, json.loads(key), _parsed(entry)) for base, key, entry in rows]

    def entry(self, thread_id: str, key: str, **wanted: Any) -> tuple[str, Any]:
        """``(base checkpoint id, parsed entry)`` of the one entry ``key`` whose fields hold ``wanted``."""
        [found] = [
            (base, entry)
            for base, stored_key, entry in self.entries(thread_id)
            if stored_key == key and all(entry.get(name) == value for name, value in wanted.items())
        ]
        return found

    def set_entry(self, thread_id: str, base_id: str, key: str, entry: Any) -> None:
        """Overwrite the stored journal entry ``key`` of a task that ran from ``base_id``."""
        if self._execute is None:
            thread = self._memory_thread(thread_id)
            [entries] = [
                entries
                for (base, _), entries in thread.journals.items()
                if base == base_id and key in entries
            ]
            entries[key] = json.dumps(entry)
            return
        changed = self._execute(
            f"UPDATE {self._prefix}_journals SET entry = ? WHERE thread_id = ? AND base_id = ? "
            "AND entry_key = ? RETURNING entry_id",
            json.dumps(entry),
            thread_id,
            base_id,
            json.dumps(key),
        )
        assert len(changed) == 1

    def pending(self, thread_id: str, checkpoint_id: str) -> Any:
        """A checkpoint's stored open pauses (parsed)."""
        if self._execute is None:
            return json.loads(self._memory_thread(thread_id).checkpoints[checkpoint_id].pending_text)
        [(pending,)] = self._execute(
            f"SELECT pending FROM {self._prefix}_checkpoints WHERE thread_id = ? AND checkpoint_id = ?",
            thread_id,
            checkpoint_id,
        )
        return _parsed(pending)

    def set_pending(self, thread_id: str, checkpoint_id: str, pending: Any) -> None:
        """Overwrite a checkpoint's stored open pauses."""
        if self._execute is None:
            self._memory_thread(thread_id).checkpoints[checkpoint_id].pending_text = json.dumps(pending)
            return
        changed = self._execute(
            f"UPDATE {self._prefix}_checkpoints SET pending = ? WHERE thread_id = ? AND checkpoint_id = ? "
            "RETURNING checkpoint_id",
            json.dumps(pending),
            thread_id,
            checkpoint_id,
        )
        assert changed


def _text(stored: Any) -> str:
    """A memory row's stored text (a row may keep its place beside it, as ``(place, text)``)."""
    return stored[-1] if isinstance(stored, tuple) else stored


def _with_text(stored: Any, text: str) -> Any:
    return (*stored[:-1], text) if isinstance(stored, tuple) else text


@contextlib.contextmanager
def stored_rows(backend: Backend, prefix: str = "ilmek") -> Iterator[StoredRows]:
    """The store's rows for the length of the block (a SQL connection outside ilmek, or memory)."""
    if isinstance(backend, MemoryBackend):
        yield StoredRows(backend, None)
        return
    with raw_sql(backend) as execute:
        yield StoredRows(backend, execute, prefix)


def reader(backend: Backend, **options: Any) -> Checkpointer:
    """A checkpointer that reads the store afresh: a new one on SQL; memory's, its value cache emptied."""
    checkpointer = backend.open(**options)
    if isinstance(backend, MemoryBackend):
        checkpointer._cache.clear()  # type: ignore[attr-defined]
    return checkpointer
