"""Rotation: each kind of stored value resealed under the current key, knowing its row's identity.

A backend's ``rekey`` walks its rows in batches and hands each stored value
here with the identity the row holds it under; :class:`Resealer` says
whether it is already sealed under the current key alone (then it is left
as it is: a rekey run again, or resumed after a kill, rewrites nothing
twice) or returns its new stored text: opened with any key of the ring (or
as plaintext, which rekey seals), sealed again with the current key to the
same place. A value that does not open stops the rekey with a
:class:`~ilmek.errors.DecryptionError`: nothing tampered is laundered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import serde
from ..errors import DecryptionError, InvalidArgumentError
from ..types import ThreadError
from . import _outcomes, _records
from ._sealing import Sealer

__all__ = ["Resealer"]


class Resealer:
    """Reseals one store's values under its keyring's current key."""

    def __init__(self, sealer: Sealer) -> None:
        cipher = sealer.cipher
        if cipher is None:
            raise InvalidArgumentError(
                "rekey needs the checkpointer opened with cipher=Keyring(...): the keys to read "
                "and the current one to write"
            )
        self._writing = sealer
        self._current_only = Sealer(cipher._variant(only_current=True, allow_plaintext=False), sealer.store)
        self._reading = Sealer(cipher._variant(only_current=False, allow_plaintext=True), sealer.store)

    def _reseal(self, decode: Callable[[Sealer], Any], encode: Callable[[Sealer, Any], Any]) -> Any:
        try:
            decode(self._current_only)
        except DecryptionError:
            return encode(self._writing, decode(self._reading))
        return None

    def channel_value(
        self,
        stored: Any,
        thread_id: str,
        channel: str,
        origin: str | None,
        *,
        index: int | None = None,
        row: str,
    ) -> tuple[str, str] | None:
        """A blob's (or the list item at ``index``'s) new ``(origin, stored text)``, or ``None``.

        ``None``: already under the current key, bound to its origin. A row
        stored before ilmek recorded origins (``origin`` is ``None``) is
        always resealed, bound from then on to ``row`` (the row's own id) as
        its origin, which the caller stores beside it.
        """
        table = "blobs" if index is None else "items"

        def decode(sealer: Sealer) -> Any:
            slot = _records.channel_slot(sealer, thread_id, channel, origin=origin, index=index)
            return _records.decode_stored_value(slot, stored, thread_id=thread_id, table=table)

        new_origin = row if origin is None else origin

        def encode(sealer: Sealer, value: Any) -> str:
            slot = _records.channel_slot(sealer, thread_id, channel, origin=new_origin, index=index)
            return slot.seal_text(serde.encode(value, where=f"channel {channel!r}"))

        text: str | None = (
            encode(self._writing, decode(self._reading)) if origin is None else self._reseal(decode, encode)
        )
        return None if text is None else (new_origin, text)

    def entry(self, stored: Any, thread_id: str, base_id: str, task_key: str) -> str | None:
        """A journal row's new stored entry, or ``None``."""

        def decode(sealer: Sealer) -> Any:
            slot = _records.journal_slot(sealer, thread_id, base_id, task_key)
            return _records.decode_entry(stored, thread_id=thread_id, checkpoint_id=base_id, slot=slot)

        def encode(sealer: Sealer, entry: Any) -> str:
            slot = _records.journal_slot(sealer, thread_id, base_id, task_key)
            return _records.encode_entry(entry, f"task {task_key!r}", slot)

        result: str | None = self._reseal(decode, encode)
        return result

    def checkpoint_parts(
        self, stored: tuple[Any, Any, Any], thread_id: str, checkpoint_id: str
    ) -> tuple[str, str, str] | None:
        """A checkpoint row's new (next, pending, carried journals), or ``None``."""
        where = {"thread_id": thread_id, "checkpoint_id": checkpoint_id}

        def decode(sealer: Sealer) -> Any:
            return (
                _records.decode_next(stored[0], sealer=sealer, **where),
                _records.decode_pending(stored[1], sealer=sealer, **where),
                _records.decode_task_journals(stored[2], sealer=sealer, **where),
            )

        def encode(sealer: Sealer, parts: Any) -> tuple[str, str, str]:
            return (
                _records.encode_next(parts[0], sealer.slot(thread_id, "input", checkpoint_id)),
                _records.encode_pending(parts[1], sealer.slot(thread_id, "pause", checkpoint_id)),
                _records.encode_task_journals(parts[2], sealer, thread_id, checkpoint_id),
            )

        result: tuple[str, str, str] | None = self._reseal(decode, encode)
        return result

    def outcome(self, stored: Any, thread_id: str) -> str | None:
        """A thread's failure or cancel record, resealed, or ``None``."""

        def decode(sealer: Sealer) -> Any:
            return _outcomes.decode_thread_outcome(stored, thread_id=thread_id, sealer=sealer)

        def encode(sealer: Sealer, outcome: Any) -> str:
            if isinstance(outcome, ThreadError):
                return _outcomes.encode_thread_error(outcome, sealer, thread_id)
            return _outcomes.encode_thread_cancel(outcome, sealer, thread_id)

        result: str | None = self._reseal(decode, encode)
        return result
