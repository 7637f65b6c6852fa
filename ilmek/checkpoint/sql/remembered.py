"""The latest checkpoint of each thread as this process last committed it (see ``checkpoint/remembered.py``).

Kept as what a read of it would find: the checkpoint row's columns (their
JSON text parsed at each use as the store gives it back: ``jsonb``'s key
order on Postgres), the values it points at from the value cache, and the
texts of the whole values this process wrote (decoded afresh at each use, so
no two runs share an object). Built by :func:`~ilmek.checkpoint.sql.rows.checkpoint_from_row`,
as a read builds it. Filled only after commits ilmek owns, as the value
cache is; a value missing from the cache means no guess (the run reads).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ...types import Checkpoint
from .. import _records
from .._delta import BlobRef, ChannelRef, LogRef, ValueCache
from .._jsonb_order import plain_as_jsonb_reads
from ..remembered import RemembersLatest
from .rows import checkpoint_from_row, epoch

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer
    from .reads import Reads

__all__ = ["LatestMemo", "SqlRemembersLatest"]

_TEXT_COLUMNS: Final = ("next_text", "pending_text", "journals_text", "chain_text", "metadata_text")
"""The parts kept as stored text, in ``CHECKPOINT_COLUMNS``'s order after the manifest."""

_ENTRY_OVERHEAD: Final = 400
"""What an entry (a row, one of its manifest's refs, a whole value) holds beyond its texts, rounded up."""


class LatestMemo:
    """Each thread's latest checkpoint as this process committed it, bounded by the memory it holds."""

    def __init__(self, owner: SqlCheckpointer, values: ValueCache) -> None:
        self._owner = owner
        #: The reads' value cache: the lists' items, and here the whole values this process wrote.
        self._values = values
        self._rows = ValueCache(max_bytes=4 * 1024 * 1024)
        #: Threads whose last guess another process had made stale: read, not guessed, until a turn of
        #: this process finds the thread where this process left it (round-robin workers read, as
        #: before, instead of sending a refused call first each turn).
        self._missed = ValueCache(max_bytes=256 * 1024)
        self._plain: Callable[[str], Any] = plain_as_jsonb_reads if owner.STORES_JSONB else json.loads

    def committed(
        self,
        thread_id: str,
        checkpoint: Checkpoint,
        fields: Mapping[str, str],
        manifest: Mapping[str, ChannelRef],
        changes: Sequence[_records.EncodedChange],
    ) -> None:
        """Remember ``checkpoint``, just committed by ilmek (never inside the caller's transaction)."""
        for change in changes:
            # Kept whatever the checkpoint: a later one of this process points at them too.
            ref = manifest.get(change.channel)
            if change.value is not None and isinstance(ref, BlobRef):
                self._values.put(
                    ("blob", thread_id, ref.blob_id),
                    (change.channel, change.origin, change.value),
                    len(change.value) + _ENTRY_OVERHEAD,
                )
        remembered = self._rows.get(thread_id)
        if remembered is not None:
            remembered_ids, _, _ = remembered
            if remembered_ids[0] == checkpoint.parent_id:
                # Nobody moved the thread since this process last wrote it: a guess would have held.
                self._missed.discard(thread_id)
        if checkpoint.next or checkpoint.pending:
            # A plan or a pause: what is recorded after it matters, so a run reads it.
            self._rows.discard(thread_id)
            return
        ids = (checkpoint.id, checkpoint.parent_id, checkpoint.plan_id, checkpoint.step, epoch(checkpoint.ts))
        texts = tuple(fields[name] for name in _TEXT_COLUMNS)
        size = sum(len(text) for text in texts) + _ENTRY_OVERHEAD * (len(manifest) + 1)
        self._rows.put(thread_id, (ids, texts, dict(manifest)), size)

    def latest(self, thread_id: str) -> Checkpoint | None:
        """The remembered checkpoint with its values, or ``None`` when it or a value is not at hand."""
        found = self._rows.get(thread_id)
        if found is None or self._missed.get(thread_id) is not None:
            return None
        ids, texts, manifest = found
        values: dict[str, Any] = {}
        for name, ref in manifest.items():
            if isinstance(ref, LogRef):
                items = self._values.get(("l", thread_id, ref.log_id))
                if items is None or len(items) < ref.length:
                    return None
                values[name] = items[: ref.length]
                continue
            kept = self._values.get(("blob", thread_id, ref.blob_id))
            if kept is None:
                return None
            channel, origin, text = kept
            slot = _records.channel_slot(self._owner.sealer, thread_id, channel, origin=origin)
            values[name] = _records.open_value(slot, self._plain(text), thread_id=thread_id, table="blobs")
        # Parsed at each use, as a read parses its row: no two checkpoints share a dict.
        row = (*ids, None, *(self._plain(text) for text in texts))  # None: the manifest, kept beside
        return checkpoint_from_row(thread_id, row, values, self._owner.sealer)

    def missed(self, thread_id: str) -> None:
        """A write conditioned on ``thread_id``'s latest checkpoint found it moved: stop guessing it."""
        self._missed.put(thread_id, True, 64 + len(thread_id))


class SqlRemembersLatest(RemembersLatest):
    """The SQL checkpointers' guess: what :class:`LatestMemo` remembers."""

    _reads: Reads

    def _remembered_latest(self, thread_id: str) -> Checkpoint | None:
        return self._reads.latest.latest(thread_id)
