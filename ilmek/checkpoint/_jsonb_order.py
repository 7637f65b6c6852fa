"""A list item as a read from Postgres gives it back: its objects' keys in ``jsonb``'s order.

``jsonb`` keeps an object's keys but not their order: it lists them
shortest first, then by their UTF-8 bytes, and keeps the last of repeated
keys. A process that remembers the items it appended must give them back
the same way, or a node would see a dict's keys in one order after a turn
run in this process and in another after a turn run elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

from .. import serde

__all__ = ["decode_as_jsonb_reads", "plain_as_jsonb_reads"]


def _jsonb_key(pair: tuple[str, Any]) -> tuple[int, bytes]:
    raw = pair[0].encode("utf-8", "surrogatepass")
    return len(raw), raw


def _in_jsonb_order(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(sorted(dict(pairs).items(), key=_jsonb_key))


_DECODER = json.JSONDecoder(object_pairs_hook=_in_jsonb_order)
"""Made once: ``json.loads`` with a hook builds a decoder at every call."""


def plain_as_jsonb_reads(text: str) -> Any:
    """JSON ``text`` parsed as a ``jsonb`` column read back gives it: every object's keys in its order.

    Raises:
        ValueError: the text is not JSON (``RecursionError`` when it nests too deeply).
    """
    if type(text) is not str:
        return json.loads(text, object_pairs_hook=_in_jsonb_order)  # bytes: json.loads finds their encoding
    return _DECODER.decode(text)


def decode_as_jsonb_reads(text: str) -> Any:
    """``serde.decode(text)``, with every JSON object's keys in the order ``jsonb`` gives them.

    Raises:
        SerializationError: as :func:`ilmek.serde.decode`.
    """
    if type(text) is str and "{" not in text:
        return serde.decode(text)  # no object, so no key order to keep: the plain decoder's result
    try:
        parsed = plain_as_jsonb_reads(text)
    except (ValueError, RecursionError):
        return serde.decode(text)  # raises the SerializationError decode() raises for such text
    return serde.from_jsonable(parsed)
