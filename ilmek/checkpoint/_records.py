"""How the parts of a checkpoint and a journal become stored text, and back.

Every backend stores the same JSON (through :mod:`ilmek.serde`), so a value
that cannot survive a database fails the same way everywhere, and always
before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .. import serde
from ..errors import SerializationError
from ..types import ChannelChange, Checkpoint, Extend, JournalEntry, Pending, Replace, ScheduledTask

__all__ = [
    "EncodedChange",
    "check_thread",
    "decode_journal",
    "decode_next",
    "decode_pending",
    "decode_task_journals",
    "encode_changes",
    "encode_fields",
    "encode_journal",
    "encode_next",
    "encode_pending",
    "encode_task_journals",
    "encode_thread_metadata",
    "json_equal",
    "metadata_matches",
]


def dump_plain(plain: Any) -> str:
    """JSON text of data that is already JSON-able (tagged by :mod:`ilmek.serde`)."""
    return json.dumps(plain, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def load_plain(stored: Any) -> Any:
    """Parse stored JSON text; a JSON column a driver already parsed passes through."""
    if isinstance(stored, (bytes, bytearray, memoryview)):
        stored = bytes(stored).decode("utf-8")
    if isinstance(stored, str):
        return json.loads(stored)
    return stored


def _journal_to_plain(entries: Iterable[JournalEntry], where: str) -> list[dict[str, Any]]:
    plain: list[dict[str, Any]] = []
    for entry in entries:
        # Keys are the author's text and may hold NUL, which JSONB refuses bare.
        record: dict[str, Any] = {"key": serde.to_jsonable(entry.key, where=where), "kind": entry.kind}
        if entry.kind == "step" or entry.answered:
            record["value"] = serde.to_jsonable(entry.value, where=f"{where} step {entry.key!r}")
        if entry.kind == "interrupt":
            record["payload"] = serde.to_jsonable(entry.payload, where=f"{where} interrupt {entry.key!r}")
            record["answered"] = entry.answered
        plain.append(record)
    return plain


def _journal_from_plain(plain: Any) -> tuple[JournalEntry, ...]:
    if not isinstance(plain, list):
        raise SerializationError("a stored journal is not a list", where="stored data")
    entries = []
    for record in plain:
        try:
            entries.append(
                JournalEntry(
                    key=serde.from_jsonable(record["key"]),
                    kind=record["kind"],
                    value=serde.from_jsonable(record.get("value")),
                    payload=serde.from_jsonable(record.get("payload")),
                    answered=bool(record.get("answered", False)),
                )
            )
        except (KeyError, TypeError) as exc:
            raise SerializationError(
                f"a stored journal entry is malformed: {record!r}", where="stored data"
            ) from exc
    return tuple(entries)


def encode_journal(task_id: str, entries: Sequence[JournalEntry]) -> str:
    """A task's journal as JSON text."""
    return dump_plain(_journal_to_plain(entries, f"journal {task_id!r}"))


def decode_journal(stored: Any) -> tuple[JournalEntry, ...]:
    """A journal from its JSON text (or the structure a JSON column returned)."""
    return _journal_from_plain(load_plain(stored))


def encode_task_journals(journals: Mapping[str, Sequence[JournalEntry]]) -> str:
    """A paused checkpoint's task journals as JSON text."""
    return dump_plain({key: _journal_to_plain(entries, f"task {key!r}") for key, entries in journals.items()})


def decode_task_journals(stored: Any) -> dict[str, tuple[JournalEntry, ...]]:
    """The inverse of :func:`encode_task_journals`."""
    plain = load_plain(stored)
    if not isinstance(plain, dict):
        raise SerializationError("stored task journals are not an object", where="stored data")
    return {key: _journal_from_plain(value) for key, value in plain.items()}


def encode_next(tasks: Sequence[ScheduledTask]) -> str:
    """The scheduled tasks as JSON text."""
    return dump_plain(
        [
            {
                "node": t.node,
                "task_key": t.task_key,
                "is_send": t.is_send,
                "input": serde.to_jsonable(t.input, where=f"the input of send {t.task_key!r}"),
            }
            for t in tasks
        ]
    )


def decode_next(stored: Any) -> tuple[ScheduledTask, ...]:
    """The inverse of :func:`encode_next`."""
    try:
        return tuple(
            ScheduledTask(
                node=t["node"],
                task_key=t["task_key"],
                is_send=bool(t["is_send"]),
                input=serde.from_jsonable(t["input"]),
            )
            for t in load_plain(stored)
        )
    except (KeyError, TypeError) as exc:
        raise SerializationError("stored scheduled tasks are malformed", where="stored data") from exc


def encode_pending(pending: Sequence[Pending]) -> str:
    """The open pauses as JSON text."""
    return dump_plain(
        [
            {
                "id": serde.to_jsonable(p.id, where=f"the pause {p.id!r}"),
                "task_id": p.task_id,
                "node": p.node,
                "key": serde.to_jsonable(p.key, where=f"the pause {p.id!r}"),
                "payload": serde.to_jsonable(p.payload, where=f"the payload of pause {p.id!r}"),
            }
            for p in pending
        ]
    )


def decode_pending(stored: Any) -> tuple[Pending, ...]:
    """The inverse of :func:`encode_pending`."""
    try:
        return tuple(
            Pending(
                id=serde.from_jsonable(p["id"]),
                task_id=p["task_id"],
                node=p["node"],
                key=serde.from_jsonable(p["key"]),
                payload=serde.from_jsonable(p["payload"]),
            )
            for p in load_plain(stored)
        )
    except (KeyError, TypeError) as exc:
        raise SerializationError("stored pauses are malformed", where="stored data") from exc


@attrs.frozen
class EncodedChange:
    """A channel change with its value or items already encoded as JSON text."""

    channel: str
    value: str | None = None
    items: tuple[str, ...] | None = None


def encode_changes(changes: Mapping[str, ChannelChange]) -> list[EncodedChange]:
    """Encode every change, so that nothing is written if any value cannot be stored.

    Raises:
        SerializationError: naming the channel (and item index) and the type.
    """
    encoded: list[EncodedChange] = []
    for name, change in changes.items():
        if isinstance(change, Replace):
            encoded.append(EncodedChange(name, value=serde.encode(change.value, where=f"channel {name!r}")))
        elif isinstance(change, Extend):
            items = tuple(
                serde.encode(item, where=f"channel {name!r} item {index}")
                for index, item in enumerate(change.items)
            )
            encoded.append(EncodedChange(name, items=items))
        else:
            raise TypeError(f"unknown channel change {change!r} for channel {name!r}")
    return encoded


def json_equal(left: Any, right: Any) -> bool:
    """Equality as JSON sees it: bools are not numbers, numbers compare by value, objects ignore key order."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(json_equal(a, b) for a, b in zip(left, right, strict=True))
    return type(left) is type(right) and bool(left == right)


def metadata_matches(metadata: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether every key of ``wanted`` is in ``metadata`` with a JSON-equal value.

    Both sides are compared in their stored (tagged JSON) form, so a tuple
    matches a tuple and a datetime a datetime.
    """
    for key, value in wanted.items():
        if key not in metadata:
            return False
        stored = serde.to_jsonable(metadata[key], where=f"metadata {key!r}")
        if not json_equal(stored, serde.to_jsonable(value, where=f"the metadata filter {key!r}")):
            return False
    return True


def encode_thread_metadata(thread_id: str, metadata: Mapping[str, Any]) -> str:
    """A thread's metadata as JSON text; its keys must be plain text, since filters query them.

    Raises:
        ValueError: a key that is not a string or contains NUL.
    """
    for key in metadata:
        if not isinstance(key, str) or "\0" in key:
            raise ValueError(
                f"metadata keys of thread {thread_id!r} must be strings without NUL "
                f"(list_threads filters by them), got {key!r}"
            )
    return serde.encode(dict(metadata), where=f"the metadata of thread {thread_id!r}")


def check_thread(thread_id: str, checkpoint: Checkpoint) -> None:
    """Refuse a checkpoint put under another thread's id."""
    if checkpoint.thread_id != thread_id:
        raise ValueError(
            f"checkpoint {checkpoint.id!r} belongs to thread {checkpoint.thread_id!r}, not {thread_id!r}"
        )


def encode_fields(checkpoint: Checkpoint) -> dict[str, str]:
    """A checkpoint's non-channel parts as JSON text, keyed by stored column name."""
    return {
        "next_text": encode_next(checkpoint.next),
        "pending_text": encode_pending(checkpoint.pending),
        "journals_text": encode_task_journals(checkpoint.task_journals),
        "metadata_text": serde.encode(
            dict(checkpoint.metadata), where=f"the metadata of checkpoint {checkpoint.id!r}"
        ),
    }
