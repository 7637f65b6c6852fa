"""Key rotation on the port: :meth:`Checkpointer.rekey` (SPEC §7a), one method of its own room.

:class:`~ilmek.checkpoint.base.Checkpointer` inherits it; each backend
implements it over its rows (``sql/rekeying.py``, ``memory.py``) with
:class:`~ilmek.checkpoint._rekeying.Resealer` doing the resealing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..crypto import RekeyCallback, RekeyProgress

__all__ = ["Rotating"]


class Rotating:
    """The port's rotation of stored values to the current key."""

    def rekey(self, *, batch: int = 500, progress: RekeyCallback | None = None) -> RekeyProgress:
        """Reseal every stored value under the keyring's current key, online (SPEC §7a).

        Values under an older key of the ring, and plaintext values (a store
        written before encryption), are sealed again with the current key;
        values already under it are left alone, so running it again, or
        after it was killed, only finishes the work. Each batch of rows is a
        transaction of its own: a run beside it waits at most one batch.

        Args:
            batch: Rows per transaction.
            progress: Called after each batch with the progress so far.

        Returns:
            How many rows were checked and resealed.

        Raises:
            InvalidArgumentError: the checkpointer has no keyring.
            DecryptionError: a value that does not open (tampered, moved, or
                under a key the ring lacks): nothing after it is resealed.
        """
        raise NotImplementedError(f"{type(self).__name__} does not rekey")
