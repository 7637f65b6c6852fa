"""Where the records layer seals and opens stored values: a store's keyring (or none) and its name.

A backend holds one :class:`Sealer`; the records layer (``_records``,
``_delta``) asks it for a :class:`Slot` naming the row a value is stored in
(thread, kind, checkpoint or task, channel or key; a channel row's origin and
position) and seals or opens the value there. The writers and readers above never see a key. Without a
keyring values are stored as they are, and a sealed value met on a read is
refused (or, in a display context, shown as :class:`~ilmek.crypto.Sealed`).
"""

from __future__ import annotations

import json
from typing import Any

from .. import crypto, serde
from ..crypto import Keyring, Place
from ..errors import DecryptionError, InvalidArgumentError

__all__ = ["PLAIN", "Sealer", "Slot"]


class Sealer:
    """How one store seals and opens its values.

    Args:
        cipher: The store's keyring, or ``None`` to store values as they are.
        store: The store's name (its table prefix), bound into every value.
    """

    def __init__(self, cipher: Keyring | None, store: str) -> None:
        if cipher is not None and not isinstance(cipher, Keyring):
            raise InvalidArgumentError(
                f"cipher must be an ilmek.crypto.Keyring or None, got {type(cipher).__name__}"
            )
        self.cipher = cipher
        self.store = store

    def slot(self, thread_id: str, kind: str, *scope: str) -> Slot:
        """The values of one row (or one group of rows) of a thread."""
        return Slot(self, thread_id, kind, scope)


class Slot:
    """Sealing and opening at one place; ``more`` names the value within it (a key, a field)."""

    __slots__ = ("_kind", "_scope", "_sealer", "_thread_id")

    def __init__(self, sealer: Sealer, thread_id: str, kind: str, scope: tuple[str, ...]) -> None:
        self._sealer = sealer
        self._thread_id = thread_id
        self._kind = kind
        self._scope = scope

    def _place(self, more: tuple[str, ...]) -> Place:
        return Place(self._sealer.store, self._thread_id, self._kind, (*self._scope, *more))

    def seal(self, plain: Any, *more: str) -> Any:
        """Tagged JSON-able data as it is stored: sealed, or itself without a keyring."""
        cipher = self._sealer.cipher
        if cipher is None:
            return plain
        return crypto.seal(cipher, serde.dump_json(plain), self._place(more))

    def seal_text(self, text: str, *more: str) -> str:
        """A value's JSON text as it is stored (a whole row's value: a blob, a list item)."""
        cipher = self._sealer.cipher
        if cipher is None:
            return text
        return serde.dump_json(crypto.seal(cipher, text, self._place(more)))

    def open(
        self, stored: Any, *more: str, checkpoint_id: str | None = None, table: str | None = None
    ) -> Any:
        """Parsed stored JSON back to the value's tagged JSON, opened and checked.

        In a display context (:func:`ilmek.serde.showing_unregistered`)
        without a keyring, a sealed value is a :class:`~ilmek.crypto.Sealed`
        placeholder; revive it with :func:`revive_opened`.

        Raises:
            DecryptionError: a sealed value without a keyring (outside a display),
                a plaintext one with a keyring that does not allow plaintext, or one
                that does not open.
        """
        cipher = self._sealer.cipher
        if crypto.is_sealed(stored):
            if cipher is None:
                if serde.shows_unregistered():
                    return crypto.Sealed(crypto.key_id_of(stored))
                raise self._refused(
                    "is sealed, and the store was opened without a keyring: pass cipher=Keyring(...) "
                    "(the CLI and console: --keys-env VAR)",
                    more,
                    checkpoint_id,
                    table,
                )
            text = crypto.open_sealed(
                cipher, stored, self._place(more), checkpoint_id=checkpoint_id, table=table
            )
            return json.loads(text)
        if cipher is not None and not cipher.allow_plaintext:
            raise self._refused(
                "is stored in plaintext, and the store is read with a keyring: a store written before "
                "encryption is read with Keyring(..., allow_plaintext=True) until rekey() has sealed it",
                more,
                checkpoint_id,
                table,
            )
        return stored

    def _refused(
        self, problem: str, more: tuple[str, ...], checkpoint_id: str | None, table: str | None
    ) -> DecryptionError:
        return crypto.decryption_error(self._place(more), problem, checkpoint_id=checkpoint_id, table=table)


#: The sealer of a store without a keyring (and of code that reads records outside any store).
PLAIN = Sealer(None, "ilmek")
