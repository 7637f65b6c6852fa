"""Encryption at rest: a keyring, and sealing a stored value to the place it is stored (SPEC §7a).

What belongs here: the keys (:class:`Keyring`), the one function that says
what a value is bound to (:func:`associated_data`), the sealed form of a
value, and sealing and opening it. Nothing here knows a table or a
checkpoint; the records layer (``ilmek.checkpoint._sealing``) names the
place of each stored value and calls these.

The AEAD is AES-256-GCM from the ``cryptography`` package (the ``[crypto]``
extra), with a random 96-bit nonce per value; nothing is written by hand
beyond composing it.

The sealed form
---------------
A sealed value is stored as one of :mod:`ilmek.serde`'s tags, so it stays
valid JSON (a Postgres JSONB column takes it) and no user value can ever be
mistaken for it (a user dict holding the ``"__ilmek__"`` key is stored as a
``dict`` tag)::

    {"__ilmek__": "sealed", "v": [1, "k2", "<base64 of nonce + ciphertext + tag>"]}

``1`` is the format version, ``"k2"`` the id of the key that sealed it (in
the clear, so rotation can find what is not yet under the current key). The
plaintext is the value's tagged JSON text. The associated data is built from
the row's identity by :func:`associated_data`: the store (table prefix), the
thread, the kind of value and its scope (checkpoint or task, channel or step
key; for a channel's row, the checkpoint that wrote it and an item's position
in its list), so a value copied anywhere else does not open.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from .errors import DecryptionError, IlmekError, InvalidArgumentError, stored_at

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "SEALED_TAG",
    "Keyring",
    "Place",
    "RekeyCallback",
    "RekeyProgress",
    "Sealed",
    "associated_data",
    "decryption_error",
    "is_sealed",
    "key_id_of",
    "new_key",
    "open_sealed",
    "seal",
]

#: The value of the ``"__ilmek__"`` key that marks a sealed value.
SEALED_TAG: Final = "sealed"
#: The version of the sealed form written now.
FORMAT_VERSION: Final = 1
#: What a key id may be: short text, safe in a log line, an environment variable and a URL.
KEY_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_KEY_BYTES: Final = 32
_NONCE_BYTES: Final = 12


def new_key() -> str:
    """A fresh random 256-bit key as standard base64, ready for ``ILMEK_KEYS`` (``id:<this>``)."""
    return base64.b64encode(os.urandom(_KEY_BYTES)).decode("ascii")


def _aead_class() -> type[AESGCM]:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise IlmekError(
            "encryption at rest needs the 'cryptography' package: pip install 'ilmek[crypto]'"
        ) from exc
    return AESGCM


class Keyring:
    """The keys a store's values are sealed with: new values use ``current``, any listed key opens.

    Args:
        keys: Key id (1 to 32 characters of ``A-Z a-z 0-9 _ . -``) to 32
            random bytes (see :func:`new_key`).
        current: The id of the key new values are sealed with.
        allow_plaintext: Read values stored before the store was encrypted
            (while :meth:`~ilmek.checkpoint.base.Checkpointer.rekey` seals
            them); without it a plaintext value is a
            :class:`~ilmek.errors.DecryptionError`.

    Raises:
        InvalidArgumentError: a malformed key id or key, or ``current`` not
            among ``keys`` (the message never shows key material).
    """

    def __init__(self, keys: Mapping[str, bytes], current: str, *, allow_plaintext: bool = False) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise InvalidArgumentError("keys must be a non-empty mapping of key id to 32 bytes")
        aead = _aead_class()
        self._ciphers: dict[str, AESGCM] = {}
        for key_id, key in keys.items():
            _check_key_id(key_id)
            if not isinstance(key, (bytes, bytearray)) or len(key) != _KEY_BYTES:
                raise InvalidArgumentError(f"key {key_id!r} must be exactly {_KEY_BYTES} bytes (AES-256)")
            self._ciphers[key_id] = aead(bytes(key))
        if current not in self._ciphers:
            raise InvalidArgumentError(f"the current key id {current!r} is not one of the keys given")
        if not isinstance(allow_plaintext, bool):
            raise InvalidArgumentError("allow_plaintext must be True or False")
        self._current = current
        self._allow_plaintext = allow_plaintext

    @classmethod
    def from_env(cls, var: str = "ILMEK_KEYS", *, allow_plaintext: bool = False) -> Keyring:
        """The keyring an environment variable holds as ``id:base64key,id:base64key,...``.

        The first key is the current one. Keys are standard base64 of 32 bytes.

        Raises:
            InvalidArgumentError: the variable is unset, empty or malformed;
                the message names the variable and the entry's position, never
                its content.
        """
        raw = os.environ.get(var)
        if not raw or not raw.strip():
            raise InvalidArgumentError(
                f"the environment variable {var!r} holding the keys is not set or empty: set it to "
                "'id:base64key[,id:base64key...]' (the first key is the current one)"
            )
        keys: dict[str, bytes] = {}
        for position, entry in enumerate(raw.split(","), start=1):
            key_id, colon, encoded = entry.strip().partition(":")
            problem = None
            if not colon or not KEY_ID_PATTERN.fullmatch(key_id):
                problem = "is not 'id:base64key' with an id of 1-32 letters, digits, '_', '.' or '-'"
            elif key_id in keys:
                problem = f"repeats the key id {key_id!r}"
            else:
                try:
                    key = base64.b64decode(encoded.strip(), validate=True)
                except (binascii.Error, ValueError):
                    key = b""
                if len(key) != _KEY_BYTES:
                    problem = f"(key id {key_id!r}) is not standard base64 of {_KEY_BYTES} bytes"
                keys[key_id] = key
            if problem is not None:
                raise InvalidArgumentError(f"entry {position} of the environment variable {var!r} {problem}")
        return cls(keys, next(iter(keys)), allow_plaintext=allow_plaintext)

    @property
    def current(self) -> str:
        """The id of the key new values are sealed with."""
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id this keyring opens."""
        return tuple(self._ciphers)

    @property
    def allow_plaintext(self) -> bool:
        """Whether values stored before encryption are read (while a store is migrated)."""
        return self._allow_plaintext

    def __repr__(self) -> str:
        return f"Keyring(key_ids={list(self._ciphers)!r}, current={self._current!r})"

    def _variant(self, *, only_current: bool, allow_plaintext: bool) -> Keyring:
        """This keyring with only its current key, or reading plaintext (for rekeying)."""
        variant = object.__new__(Keyring)
        variant._ciphers = (
            {self._current: self._ciphers[self._current]} if only_current else dict(self._ciphers)
        )
        variant._current = self._current
        variant._allow_plaintext = allow_plaintext
        return variant

    def _seal_bytes(self, plaintext: bytes, associated: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(_NONCE_BYTES)
        return self._current, nonce + self._ciphers[self._current].encrypt(nonce, plaintext, associated)

    def _open_bytes(self, key_id: str, sealed: bytes, associated: bytes) -> bytes | None:
        """The plaintext, or ``None`` when the seal fails (tampered, moved, another key's)."""
        from cryptography.exceptions import InvalidTag

        try:
            return self._ciphers[key_id].decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], associated)
        except InvalidTag:
            return None


def _check_key_id(key_id: Any) -> None:
    if not isinstance(key_id, str) or not KEY_ID_PATTERN.fullmatch(key_id):
        raise InvalidArgumentError(
            f"a key id must be 1 to 32 letters, digits, '_', '.' or '-', got {key_id!r}"
        )


@attrs.frozen
class Place:
    """Where a stored value lives: everything its associated data binds it to.

    Attributes:
        store: The store's name (its table prefix).
        thread_id: The thread.
        kind: What the value is (``"value"``, ``"item"``, ``"step"``, ``"pause"``, ...).
        scope: The rest of the row's identity: checkpoint or task, channel or step key.
    """

    store: str
    thread_id: str
    kind: str
    scope: tuple[str, ...] = ()

    def describe(self) -> str:
        """The place in words, for an error message (ids and names only, never the value)."""
        return f"{self.kind} {'/'.join(self.scope)!r}" if self.scope else self.kind


def associated_data(place: Place) -> bytes:
    """The associated data that binds a sealed value to its place: the one definition of it."""
    identity = ["ilmek-sealed", FORMAT_VERSION, place.store, place.thread_id, place.kind, *place.scope]
    return json.dumps(identity, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def decryption_error(
    place: Place,
    problem: str,
    *,
    checkpoint_id: str | None = None,
    table: str | None = None,
    key_id: str | None = None,
) -> DecryptionError:
    """The error for a value at ``place`` that is refused: names the thread and row, never a key."""
    return DecryptionError(
        f"the {place.describe()} stored for {stored_at(place.thread_id, checkpoint_id, table)} {problem}",
        thread_id=place.thread_id,
        checkpoint_id=checkpoint_id,
        table=table,
        key_id=key_id,
    )


def is_sealed(plain: Any) -> bool:
    """Whether stored (parsed) JSON is a sealed value."""
    return type(plain) is dict and plain.get("__ilmek__") == SEALED_TAG


def key_id_of(plain: Any) -> str | None:
    """The key id a sealed value names (``None``: not a well-formed sealed value)."""
    if not is_sealed(plain):
        return None
    body = plain.get("v")
    if isinstance(body, list) and len(body) == 3 and isinstance(body[1], str):
        return body[1]
    return None


def seal(keyring: Keyring, text: str, place: Place) -> dict[str, Any]:
    """A value's JSON text sealed under the current key, bound to ``place``, as stored JSON."""
    key_id, sealed = keyring._seal_bytes(text.encode("utf-8"), associated_data(place))
    return {"__ilmek__": SEALED_TAG, "v": [FORMAT_VERSION, key_id, base64.b64encode(sealed).decode("ascii")]}


def open_sealed(
    keyring: Keyring,
    plain: Any,
    place: Place,
    *,
    checkpoint_id: str | None = None,
    table: str | None = None,
) -> str:
    """The JSON text a sealed value holds, if it was sealed for ``place`` under a key of ``keyring``.

    Raises:
        DecryptionError: malformed, under an unknown key id (named), or its
            seal fails (tampered, or moved from another place).
    """

    def refused(problem: str, key_id: str | None = None) -> DecryptionError:
        return decryption_error(place, problem, checkpoint_id=checkpoint_id, table=table, key_id=key_id)

    body = plain.get("v") if isinstance(plain, dict) else None
    if not (
        isinstance(body, list) and len(body) == 3 and isinstance(body[1], str) and isinstance(body[2], str)
    ):
        raise refused("is not a well-formed sealed value: restore it from a backup or delete the thread")
    version, key_id, encoded = body
    if version != FORMAT_VERSION:
        raise refused(f"is sealed in format {version!r}, which this ilmek does not read: upgrade ilmek")
    if key_id not in keyring._ciphers:
        raise refused(
            f"is sealed under key id {key_id!r}, which the keyring does not have: add that key to the "
            "keyring (keep old keys until `rekey` has rewritten every value)",
            key_id,
        )
    try:
        sealed = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        sealed = b""
    text = keyring._open_bytes(key_id, sealed, associated_data(place)) if sealed else None
    if text is None:
        raise refused(
            "does not open: it was tampered with or moved from another thread, checkpoint, channel, "
            "list position, step, pause or store. Restore the row from a backup or delete the thread",
            key_id,
        )
    return text.decode("utf-8")


@attrs.frozen
class Sealed:
    """A sealed value shown without its keyring (the CLI and console, given no ``--keys-env``).

    Attributes:
        key_id: The id of the key it is sealed under.
    """

    key_id: str | None

    def __repr__(self) -> str:
        return f"<sealed with key {self.key_id!r}>"

    @property
    def label(self) -> str:
        """How a display names it."""
        return f"sealed (key {self.key_id}; pass --keys-env to read it)"


@attrs.frozen(kw_only=True)
class RekeyProgress:
    """How far :meth:`~ilmek.checkpoint.base.Checkpointer.rekey` has come.

    Attributes:
        checked: Stored rows read so far.
        rewritten: Rows resealed under the current key (old key or plaintext before).
        batches: Transactions committed so far.
        table: The table being worked through (``None`` once done).
    """

    checked: int = 0
    rewritten: int = 0
    batches: int = 0
    table: str | None = None

    def __str__(self) -> str:
        where = f" ({self.table})" if self.table is not None else ""
        return f"{self.checked} rows checked, {self.rewritten} resealed, {self.batches} batches{where}"


RekeyCallback = Callable[[RekeyProgress], None]
"""What ``rekey(progress=...)`` calls after each batch."""
