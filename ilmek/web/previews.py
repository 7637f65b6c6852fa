"""The open pauses the threads page lists, read without decoding their payloads whole.

The inbox shows what each paused thread asks: its first pause's question.
A payload may be megabytes, or forged to be slow to decode, and the inbox
is read on every view, so from a SQL store the stored pauses are read as
JSON text and each payload is cut to a bounded preview *before* anything is
decoded: at most :data:`PREVIEW_ITEMS` items of each container and
:data:`PREVIEW_NODES` values in all, :data:`PREVIEW_DEPTH` levels, text cut
at :data:`PREVIEW_TEXT` characters; a payload's ``question`` is kept first.
A preview that cannot be decoded reads as a note saying so, and the page
goes on. Other stores keep payloads in memory and hand them over as they are.

With :mod:`ilmek.web.counts`, this is where the console reads columns of
its own: the ``pending`` column of the thread's latest checkpoint and the
graph its ``metadata`` names (:func:`latest_summary`, one query), through
the checkpointer's own transactions and SQL dialect.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .. import crypto, serde
from ..checkpoint.base import Checkpointer
from ..checkpoint.sql import SqlCheckpointer
from ..errors import SerializationError
from ..types import Pending

__all__ = [
    "PREVIEW_DEPTH",
    "PREVIEW_ITEMS",
    "PREVIEW_NODES",
    "PREVIEW_TEXT",
    "LatestSummary",
    "cut",
    "latest_pauses",
    "latest_summary",
    "ran_nodes",
]

PREVIEW_ITEMS: Final = 50
"""The most items of one list, dict or set a preview keeps (more than a row's line shows)."""
PREVIEW_NODES: Final = 1000
"""The most values a preview keeps in all."""
PREVIEW_DEPTH: Final = 8
"""How deep a preview goes; deeper containers read as ``…``."""
PREVIEW_TEXT: Final = 500
"""The most characters of a text a preview keeps."""

_TAG: Final = "__ilmek__"
# Tags whose "v" is a list of items (kept in order, cut at PREVIEW_ITEMS).
_LISTED: Final = frozenset({"tuple", "set", "frozenset", "str", "ustr"})
_LATEST_SUMMARY: Final = (
    "SELECT {jo_pending}, {jo_metadata} FROM {p}_checkpoints WHERE thread_id = :thread_id "
    "ORDER BY checkpoint_id DESC LIMIT 1"
)
# A checkpoint's metadata is small (its source, run, graph, step); one larger than this is not read.
_MAX_METADATA: Final = 64 * 1024


class _Budget:
    """How many more values a preview may keep."""

    def __init__(self, nodes: int) -> None:
        self.left = nodes

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def _cut_items(items: list[Any], budget: _Budget, depth: int) -> list[Any]:
    kept = []
    for item in items[:PREVIEW_ITEMS]:
        if not budget.take():
            break
        kept.append(_cut(item, budget, depth + 1))
    return kept


def _cut_tagged(value: dict[str, Any], budget: _Budget, depth: int) -> Any:
    tag, payload = value.get(_TAG), value.get("v")
    if type(tag) is not str:
        # A forged tag (a list, an object): left whole for decoding to refuse, or to show as damaged.
        return value
    if tag in _LISTED and type(payload) is list:
        return {**value, "v": _cut_items(payload, budget, depth)}
    if tag == "dict" and type(payload) is list:
        pairs = []
        for pair in payload[:PREVIEW_ITEMS]:
            if not budget.take():
                break
            if type(pair) is list and len(pair) == 2:
                pair = [_cut(pair[0], budget, depth + 1), _cut(pair[1], budget, depth + 1)]
            pairs.append(pair)
        return {**value, "v": pairs}
    if tag == "obj" and type(payload) is dict and len(payload) <= PREVIEW_ITEMS:
        # Every field is kept (the class needs them all); their values are cut.
        return {**value, "v": {key: _cut(item, budget, depth + 1) for key, item in payload.items()}}
    # A scalar's tag (an int, bytes, a time...), or one this preview does not take apart.
    return value


def cut(plain: Any, budget: int = PREVIEW_NODES) -> Any:
    """A bounded preview of stored JSON (as parsed, tags not yet decoded), to decode in bounded time.

    Containers keep their first :data:`PREVIEW_ITEMS` items and a preview
    at most ``budget`` values in all; a dict's ``question`` comes first.
    Tags keep their shape, so the preview decodes to values of the stored
    types (a set of its first items, a registered object with its fields).
    """
    return _cut(plain, _Budget(budget), 0)


def _cut(plain: Any, budget: _Budget, depth: int) -> Any:
    kind = type(plain)
    if kind is str:
        return plain if len(plain) <= PREVIEW_TEXT else plain[:PREVIEW_TEXT] + "…"
    if kind is not list and kind is not dict:
        return plain
    if depth >= PREVIEW_DEPTH:
        return "…"
    if kind is list:
        return _cut_items(plain, budget, depth)
    if _TAG in plain:
        return _cut_tagged(plain, budget, depth)
    keys = list(plain)[:PREVIEW_ITEMS]
    if "question" in plain and "question" not in keys:
        keys[-1] = "question"
    # The question first: it is what the inbox shows, whatever the budget left for the rest.
    keys.sort(key=lambda key: key != "question")
    kept: dict[str, Any] = {}
    for key in keys:
        if not budget.take():
            break
        kept[key] = _cut(plain[key], budget, depth + 1)
    return kept


def _unreadable(why: str) -> str:
    return f"(cannot be shown: {why})"


def _preview_pauses(stored: Any) -> tuple[Pending, ...]:
    """The pauses of a stored ``pending`` column, each payload a decoded preview."""
    if isinstance(stored, (bytes, bytearray, memoryview)):
        stored = bytes(stored).decode("utf-8", "replace")
    try:
        # Parsing is linear and runs in C; it is the decoding of tags that a payload can make slow.
        plain = json.loads(stored) if isinstance(stored, str) else stored
    except (ValueError, RecursionError):
        plain = None
    if not isinstance(plain, list):
        problem = _unreadable("the stored pauses are malformed")
        return (Pending(id="?", task_id="?", node="?", key="?", payload=problem),)
    return tuple(
        Pending(
            id=_name(item.get("id")),
            task_id=_name(item.get("task_id")),
            node=_name(item.get("node")),
            key=_name(item.get("key")),
            payload=_preview_payload(item.get("payload")),
            kind="timer" if item.get("kind") == "timer" else "person",
            deadline=_deadline(item.get("deadline")),
            on_timeout=_preview_payload(item.get("on_timeout")),
            answers=_preview_contract(item.get("answers")),
            ns=_path(item.get("ns")),
        )
        for item in plain[:PREVIEW_ITEMS]
        if isinstance(item, dict)
    )


def _path(plain: Any) -> tuple[str, ...]:
    """A stored pause's subgraph path (``()`` at the root, or for anything but a list of names)."""
    if not isinstance(plain, list):
        return ()
    return tuple(_name(part) for part in plain[:PREVIEW_ITEMS])


def _preview_contract(plain: Any) -> Mapping[str, Any] | None:
    """A stored pause's contract, as a preview (enough for the inbox to know a choice from a review)."""
    contract = _preview_payload(plain) if plain is not None else None
    return contract if isinstance(contract, Mapping) else None


def _deadline(plain: Any) -> _dt.datetime | None:
    """A stored pause's deadline (epoch seconds), or ``None`` when it has none or it is malformed."""
    if isinstance(plain, bool) or not isinstance(plain, int | float):
        return None
    try:
        return _dt.datetime.fromtimestamp(plain, _dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _name(plain: Any) -> str:
    """A pause's id, node or key (text, perhaps tagged for a NUL), or ``?``."""
    try:
        value = serde.from_jsonable(cut(plain))
    except SerializationError:
        return "?"
    return value if isinstance(value, str) and value else "?"


class _Sealed:
    """A preview's mark for a sealed payload: the checkpointer reads it instead."""


def _preview_payload(plain: Any) -> Any:
    """A payload's preview, decoded; if some part of it cannot be, its question alone, or a note."""
    if crypto.is_sealed(plain):
        return _Sealed()
    try:
        return serde.from_jsonable(cut(plain))
    except SerializationError as error:
        problem = _unreadable(str(error))
    if type(plain) is dict and _TAG not in plain and "question" in plain:
        try:
            return {"question": serde.from_jsonable(cut(plain["question"]))}
        except SerializationError:
            pass
    return problem


@attrs.frozen(kw_only=True)
class LatestSummary:
    """What a row of the threads page reads of a thread's latest checkpoint.

    Attributes:
        pauses: Its open pauses, each payload a bounded preview (only when asked for).
        graph: The graph it names, if it names one.
        ran: The nodes whose superstep wrote it (from its metadata's task
            keys; empty for an input, a fork or an edit).
    """

    pauses: tuple[Pending, ...] = ()
    graph: str | None = None
    ran: tuple[str, ...] = ()


def _metadata(stored: Any) -> dict[str, Any]:
    """A checkpoint's stored metadata as a dict (empty when too long or unreadable)."""
    if isinstance(stored, (bytes, bytearray, memoryview)):
        stored = bytes(stored).decode("utf-8", "replace")
    if isinstance(stored, str):
        if len(stored) > _MAX_METADATA:
            return {}
        try:
            stored = json.loads(stored)
        except (ValueError, RecursionError):
            return {}
    return stored if isinstance(stored, dict) else {}


def ran_nodes(metadata: Mapping[str, Any]) -> list[str] | None:
    """The nodes of the task keys a superstep's checkpoint records (one per task), or ``None`` without."""
    recorded = metadata.get("tasks")
    if not isinstance(recorded, list) or not all(isinstance(key, str) for key in recorded):
        return None
    # A send's task key is node#n; a node's name holds no "#".
    return [key.split("#", 1)[0] for key in recorded]


def _summary(metadata: Mapping[str, Any], pauses: tuple[Pending, ...]) -> LatestSummary:
    name = metadata.get("graph")
    ran = tuple(dict.fromkeys(ran_nodes(metadata) or ()))
    return LatestSummary(pauses=pauses, graph=name if isinstance(name, str) else None, ran=ran)


def latest_summary(checkpointer: Checkpointer, thread_id: str, *, pauses: bool) -> LatestSummary:
    """The graph a thread's latest checkpoint names, and (``pauses``) its open pauses as previews.

    Raises:
        StorageError: the store could not be read.
    """
    if not isinstance(checkpointer, SqlCheckpointer):
        latest = checkpointer.list(thread_id, limit=1)
        if not latest:
            return LatestSummary()
        return _summary(latest[0].metadata, latest[0].pending if pauses else ())
    statement = checkpointer.statements.built(_LATEST_SUMMARY)
    rows = checkpointer.transact(
        lambda session: session.query(statement, thread_id=thread_id),
        what="read a thread's latest checkpoint",
        thread_id=thread_id,
        write=False,
    )
    if not rows:
        return LatestSummary()
    previews = _preview_pauses(rows[0][0]) if pauses else ()
    if any(isinstance(pause.payload, _Sealed) for pause in previews):
        # A sealed payload is authenticated (a forged one does not open), so it is
        # read whole, opened by the checkpointer (shown as sealed without its keys).
        latest = checkpointer.list(thread_id, limit=1)
        previews = latest[0].pending if latest else ()
    return _summary(_metadata(rows[0][1]), previews)


def latest_pauses(checkpointer: Checkpointer, thread_id: str) -> tuple[Pending, ...]:
    """The open pauses of the thread's latest checkpoint, payloads as bounded previews.

    Raises:
        StorageError: the store could not be read.
    """
    return latest_summary(checkpointer, thread_id, pauses=True).pauses
