"""Reading checkpoints back: one (``get``/``load``), a history (``list``), a page of a list channel.

Channel values are rebuilt from a checkpoint's manifest by
:func:`~ilmek.checkpoint._delta.read_channels`, through a process-wide value
cache filled only after reads and commits ilmek owns. Manifests never change
once committed, so the ones this process saw are remembered too.

A read is several statements, each its own snapshot: a delete or a prune
that commits between the checkpoint's row and its values leaves values
missing. That is not damage: a read that finds values missing while the
checkpoint row is gone reads again (a run then starts after the delete), or
says the checkpoint is gone (:class:`~ilmek.errors.CheckpointNotFoundError`).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ... import checks
from ...dbapi import Session
from ...errors import CheckpointNotFoundError, CorruptCheckpointError
from ...types import Checkpoint, LazyChannels
from .. import _records
from .._delta import ChannelRef, ValueCache, manifest_from_plain, read_channel_slice, read_channels
from ..holds import Hold
from .remembered import LatestMemo
from .rows import checkpoint_from_row
from .statements import CHECKPOINT_COLUMNS, Statements
from .store import SqlDeltaStore

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["Reads"]

#: Reads of the latest checkpoint begun again when a delete or prune took its values meanwhile.
_REREADS = 3


class _Vanished(Exception):
    """Internal: a checkpoint (and its values) was deleted or pruned while it was being read."""


_MANIFEST_ENTRY_BYTES: Final = 200
"""What one entry of a manifest (a channel name and a ref of one or two ints) holds, rounded up from
:func:`ilmek.checkpoint._held.held_bytes` (about 180 bytes); counted so, not walked, at every commit."""


class Reads:
    """The reads of one SQL checkpointer, and what it remembers of them."""

    def __init__(self, owner: SqlCheckpointer, statements: Statements) -> None:
        self._owner = owner
        self._statements = statements
        #: Channel values by where they are stored (see ValueCache).
        self.values = ValueCache()
        #: Manifests never change once committed: the ones this process saw.
        self.manifests = ValueCache(max_bytes=4 * 1024 * 1024)
        #: Each thread's latest checkpoint as this process committed it: a run's guess.
        self.latest = LatestMemo(owner, self.values)

    # --- manifests --------------------------------------------------------------------

    def store(self, session: Session) -> SqlDeltaStore:
        """The delta primitives inside ``session``."""
        return SqlDeltaStore(self._statements, session, self._owner.sealer)

    def remember_manifest(self, thread_id: str, checkpoint_id: str, manifest: dict[str, ChannelRef]) -> None:
        """Remember a committed checkpoint's manifest (it never changes)."""
        self.manifests.put((thread_id, checkpoint_id), manifest, _MANIFEST_ENTRY_BYTES * (len(manifest) + 1))

    def known_manifest(self, thread_id: str, checkpoint_id: str) -> dict[str, ChannelRef] | None:
        """A manifest this process remembers, or None."""
        found: dict[str, ChannelRef] | None = self.manifests.get((thread_id, checkpoint_id))
        return found

    def manifest(self, session: Session, thread_id: str, checkpoint_id: str) -> dict[str, ChannelRef] | None:
        """A checkpoint's manifest as stored, or None when there is no such checkpoint."""
        rows = session.query(
            self._statements.named("manifest"), thread_id=thread_id, checkpoint_id=checkpoint_id
        )
        if not rows:
            return None
        plain = _records.load_plain(rows[0][0], thread_id=thread_id, checkpoint_id=checkpoint_id)
        return manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=checkpoint_id)

    def channel_values(
        self,
        session: Session,
        thread_id: str,
        manifest: Mapping[str, ChannelRef],
        checkpoint_id: str | None = None,
    ) -> dict[str, Any]:
        """The values a manifest points at (through the cache, which only reads ilmek owns fill).

        With ``checkpoint_id``: values found missing while that checkpoint's
        row is gone too raise ``_Vanished`` (a delete or prune committed
        meanwhile), not corruption.
        """
        try:
            return read_channels(
                self.store(session), thread_id, manifest, self.values, remember=not session.joined
            )
        except CorruptCheckpointError:
            if checkpoint_id is not None and self.manifest(session, thread_id, checkpoint_id) is None:
                raise _Vanished from None
            raise

    # --- checkpoints ------------------------------------------------------------------

    def load(
        self, thread_id: str, checkpoint_id: str | None = None, *, hold: Hold | None = None
    ) -> Checkpoint | None:
        """A checkpoint with its values (the latest when no id is given), through the hold's connection."""
        thread_id = checks.thread_id(thread_id)
        checkpoint_id = checks.latest_or_checkpoint_id(checkpoint_id)
        for _ in range(_REREADS):
            try:
                return self._load(thread_id, checkpoint_id, hold)
            except _Vanished:
                if checkpoint_id is not None:
                    return None  # that checkpoint is gone: an unknown id reads as None
        raise _records.gone_error(thread_id, "(latest)")

    def _load(self, thread_id: str, checkpoint_id: str | None, hold: Hold | None) -> Checkpoint | None:
        def work(session: Session) -> Checkpoint | None:
            if checkpoint_id is None:
                rows = session.query(self._statements.named("latest_checkpoint"), thread_id=thread_id)
            else:
                rows = session.query(
                    self._statements.named("checkpoint"), thread_id=thread_id, checkpoint_id=checkpoint_id
                )
            if not rows:
                return None
            row = rows[0]
            found_id = row[0]
            plain = _records.load_plain(row[5], thread_id=thread_id, checkpoint_id=found_id)
            manifest = manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=found_id)
            values = self.channel_values(session, thread_id, manifest, found_id)
            if not session.joined:
                session.after_commit(lambda: self.remember_manifest(thread_id, found_id, manifest))
            return checkpoint_from_row(thread_id, row, values, self._owner.sealer)

        result: Checkpoint | None = self._owner.transact(
            work, what="read a checkpoint", thread_id=thread_id, write=False, hold=hold
        )
        return result

    def list(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> builtins.list[Checkpoint]:
        """The thread's checkpoints, newest first, their values loaded when first read."""
        thread_id = checks.thread_id(thread_id)
        limit = checks.count(limit, "limit", optional=True)
        before = checks.optional_checkpoint_id(before, "before")
        conditions = "thread_id = :thread_id" + (" AND checkpoint_id < :before" if before is not None else "")
        suffix = " LIMIT :limit" if limit is not None else ""
        template = (
            f"SELECT {CHECKPOINT_COLUMNS} FROM {{p}}_checkpoints WHERE {conditions} "
            f"ORDER BY checkpoint_id DESC{suffix}"
        )

        def work(session: Session) -> builtins.list[tuple[Any, ...]]:
            params: dict[str, Any] = {"thread_id": thread_id}
            if before is not None:
                params["before"] = before
            if limit is not None:
                params["limit"] = limit
            return session.query(self._statements.built(template), **params)

        rows = self._owner.transact(work, what="list checkpoints", thread_id=thread_id, write=False)
        return [
            checkpoint_from_row(
                thread_id, row, self._lazy_values(thread_id, row[0], row[5]), self._owner.sealer
            )
            for row in rows
        ]

    def _lazy_values(self, thread_id: str, checkpoint_id: str, stored_manifest: Any) -> LazyChannels:
        plain = _records.load_plain(stored_manifest, thread_id=thread_id, checkpoint_id=checkpoint_id)
        manifest = manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=checkpoint_id)

        def load() -> dict[str, Any]:
            try:
                values: dict[str, Any] = self._owner.transact(
                    lambda session: self.channel_values(session, thread_id, manifest, checkpoint_id),
                    what="read checkpoint values",
                    thread_id=thread_id,
                    write=False,
                )
            except _Vanished:
                raise _records.gone_error(thread_id, checkpoint_id) from None
            return values

        return LazyChannels(load)

    def read_channel(
        self,
        thread_id: str,
        channel: str,
        offset: int = 0,
        limit: int | None = None,
        *,
        checkpoint_id: str | None = None,
    ) -> builtins.list[Any]:
        """Items ``[offset, offset + limit)`` of a list channel, read in SQL."""
        thread_id = checks.thread_id(thread_id)
        channel = checks.text(channel, "channel")
        offset = checks.count(offset, "offset") or 0
        limit = checks.count(limit, "limit", optional=True)
        checkpoint_id = checks.optional_checkpoint_id(checkpoint_id)

        def work(session: Session) -> builtins.list[Any]:
            manifest = None
            found_id = checkpoint_id
            if checkpoint_id is None:
                rows = session.query(self._statements.named("latest_checkpoint"), thread_id=thread_id)
                if rows:
                    found_id = rows[0][0]
                    plain = _records.load_plain(rows[0][5], thread_id=thread_id, checkpoint_id=found_id)
                    manifest = manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=found_id)
            else:
                manifest = self.manifest(session, thread_id, checkpoint_id)
            if manifest is None:
                raise CheckpointNotFoundError(
                    f"thread {thread_id!r} has no checkpoint {checkpoint_id or '(latest)'}",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                )
            ref = manifest.get(channel)
            if ref is None:
                return []
            try:
                return read_channel_slice(self.store(session), thread_id, channel, ref, offset, limit)
            except CorruptCheckpointError:
                if found_id is not None and self.manifest(session, thread_id, found_id) is None:
                    raise _records.gone_error(thread_id, found_id) from None
                raise

        result: builtins.list[Any] = self._owner.transact(
            work, what="read a channel", thread_id=thread_id, write=False
        )
        return result
