"""How the parts of a checkpoint and a journal become stored text, and back.

Every backend stores the same JSON (through :mod:`ilmek.serde`), so a value
that cannot survive a database fails the same way everywhere, and always
before anything is written. Reading goes the other way with suspicion: a
stored row may have been written by something other than ilmek, or damaged,
so every structural field is checked for shape and type, and any problem
becomes a :class:`~ilmek.errors.CorruptCheckpointError` that names the
thread (and the checkpoint and table where known), never a raw exception.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .. import checks, serde
from ..errors import CheckpointNotFoundError, CorruptCheckpointError, InvalidArgumentError, SerializationError
from ..types import (
    ChannelChange,
    Checkpoint,
    Extend,
    JournalEntry,
    Pending,
    Replace,
    ScheduledTask,
    ThreadCancel,
    ThreadError,
)

__all__ = [
    "EncodedChange",
    "check_metadata_filter",
    "check_thread",
    "corrupt",
    "decode_chain",
    "decode_entry",
    "decode_journal",
    "decode_metadata",
    "decode_next",
    "decode_pending",
    "decode_task_journals",
    "decode_thread_error",
    "decode_thread_outcome",
    "decode_value",
    "dump_plain",
    "encode_chain",
    "encode_changes",
    "encode_entry",
    "encode_fields",
    "encode_journal",
    "encode_next",
    "encode_pending",
    "encode_task_journals",
    "encode_thread_cancel",
    "encode_thread_error",
    "encode_thread_metadata",
    "gone_error",
    "json_equal",
    "load_plain",
    "metadata_matches",
    "revive",
    "stored_key",
]


def gone_error(thread_id: str, checkpoint_id: str) -> CheckpointNotFoundError:
    """The error for a checkpoint deleted or pruned after it was listed, before its values were read."""
    return CheckpointNotFoundError(
        f"checkpoint {checkpoint_id!r} of thread {thread_id!r} was pruned or deleted while it was being "
        "read; list the thread's checkpoints again",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
    )


def corrupt(
    problem: str,
    *,
    thread_id: str | None,
    checkpoint_id: str | None = None,
    table: str | None = None,
) -> CorruptCheckpointError:
    """The error for stored data that ilmek cannot read, naming where it is."""
    where = f"thread {thread_id!r}"
    if checkpoint_id is not None:
        where += f", checkpoint {checkpoint_id!r}"
    if table is not None:
        where += f" ({table})"
    return CorruptCheckpointError(
        f"stored data of {where} is malformed: {problem}. It was not written by this ilmek or "
        "was damaged: restore it from a backup, fork from an earlier checkpoint, or delete the thread",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        table=table,
    )


def dump_plain(plain: Any) -> str:
    """JSON text of data that is already JSON-able (tagged by :mod:`ilmek.serde`)."""
    return serde.dump_json(plain)


def load_plain(
    stored: Any, *, thread_id: str | None = None, checkpoint_id: str | None = None, table: str | None = None
) -> Any:
    """Parse stored JSON text; a JSON column a driver already parsed passes through.

    Raises:
        CorruptCheckpointError: the text is not JSON, or nests too deeply.
    """
    if isinstance(stored, (bytes, bytearray, memoryview)):
        try:
            stored = bytes(stored).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise corrupt(
                "it is not UTF-8 text", thread_id=thread_id, checkpoint_id=checkpoint_id, table=table
            ) from exc
    if isinstance(stored, str):
        try:
            return json.loads(stored)
        except RecursionError:
            raise corrupt(
                "its JSON nests too deeply to read",
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                table=table,
            ) from None
        except ValueError as exc:
            raise corrupt(
                f"it is not JSON ({exc})", thread_id=thread_id, checkpoint_id=checkpoint_id, table=table
            ) from exc
    return stored


def revive(
    plain: Any, *, thread_id: str | None, checkpoint_id: str | None = None, table: str | None = None
) -> Any:
    """A stored value from its parsed JSON, with any problem named as corruption."""
    try:
        return serde.from_jsonable(plain)
    except SerializationError as exc:
        raise corrupt(str(exc), thread_id=thread_id, checkpoint_id=checkpoint_id, table=table) from exc


def decode_value(
    stored: Any, *, thread_id: str | None, checkpoint_id: str | None = None, table: str | None = None
) -> Any:
    """A stored value from its JSON text (or parsed JSON), checked."""
    return revive(
        load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table=table),
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        table=table,
    )


# --- journal entries ----------------------------------------------------------------


def _entry_to_plain(entry: JournalEntry, where: str) -> dict[str, Any]:
    # Keys are the author's text and may hold NUL, which JSONB refuses bare.
    record: dict[str, Any] = {"key": serde.to_jsonable(entry.key, where=where), "kind": entry.kind}
    if entry.kind == "step" or entry.answered:
        record["value"] = serde.to_jsonable(entry.value, where=f"{where} step {entry.key!r}")
    if entry.kind == "interrupt":
        record["payload"] = serde.to_jsonable(entry.payload, where=f"{where} interrupt {entry.key!r}")
        record["answered"] = entry.answered
    elif entry.kind == "unstored":
        record["payload"] = serde.to_jsonable(entry.payload, where=f"{where} step {entry.key!r}")
    return record


def _entry_from_plain(record: Any, *, thread_id: str | None, checkpoint_id: str | None) -> JournalEntry:
    def bad(problem: str) -> CorruptCheckpointError:
        return corrupt(
            f"a journal entry {problem}", thread_id=thread_id, checkpoint_id=checkpoint_id, table="journals"
        )

    if not isinstance(record, dict):
        raise bad("is not an object")
    key = revive(record.get("key"), thread_id=thread_id, checkpoint_id=checkpoint_id, table="journals")
    if not isinstance(key, str) or not key:
        raise bad("has no key")
    kind = record.get("kind")
    if kind not in ("step", "interrupt", "unstored"):
        raise bad(f"has an unknown kind {kind!r}")
    answered = record.get("answered", False)
    if not isinstance(answered, bool):
        raise bad("has a malformed 'answered' flag")
    return JournalEntry(
        key=key,
        kind=kind,
        value=revive(record.get("value"), thread_id=thread_id, checkpoint_id=checkpoint_id, table="journals"),
        payload=revive(
            record.get("payload"), thread_id=thread_id, checkpoint_id=checkpoint_id, table="journals"
        ),
        answered=answered,
    )


def stored_key(key: str) -> str:
    """A journal key as its row stores it, for uniqueness only: JSON-escaped ASCII.

    The author's key may hold NUL or a lone surrogate, which a text column
    cannot; the escaped form can, and two keys never share one. The entry
    itself carries the key as it was.
    """
    return json.dumps(key, ensure_ascii=True)


def encode_entry(entry: JournalEntry, where: str) -> str:
    """One journal entry as JSON text (one stored row).

    Raises:
        SerializationError: the entry's value cannot be stored.
    """
    return dump_plain(_entry_to_plain(entry, where))


def decode_entry(stored: Any, *, thread_id: str | None, checkpoint_id: str | None = None) -> JournalEntry:
    """One journal entry from its stored row."""
    plain = load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table="journals")
    return _entry_from_plain(plain, thread_id=thread_id, checkpoint_id=checkpoint_id)


def encode_journal(task_id: str, entries: Sequence[JournalEntry]) -> str:
    """A task's journal as JSON text."""
    return dump_plain([_entry_to_plain(entry, f"journal {task_id!r}") for entry in entries])


def decode_journal(stored: Any, *, thread_id: str | None = None) -> tuple[JournalEntry, ...]:
    """A journal from its JSON text (or the structure a JSON column returned)."""
    plain = load_plain(stored, thread_id=thread_id, table="journals")
    if not isinstance(plain, list):
        raise corrupt("a stored journal is not a list", thread_id=thread_id, table="journals")
    return tuple(_entry_from_plain(record, thread_id=thread_id, checkpoint_id=None) for record in plain)


def encode_task_journals(journals: Mapping[str, Sequence[JournalEntry]]) -> str:
    """Journals carried in a checkpoint, by task key, as JSON text."""
    return dump_plain(
        {
            key: [_entry_to_plain(entry, f"task {key!r}") for entry in entries]
            for key, entries in journals.items()
        }
    )


def decode_task_journals(
    stored: Any, *, thread_id: str | None = None, checkpoint_id: str | None = None
) -> dict[str, tuple[JournalEntry, ...]]:
    """The inverse of :func:`encode_task_journals`."""
    plain = load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table="checkpoints")
    if not isinstance(plain, dict) or not all(isinstance(value, list) for value in plain.values()):
        raise corrupt("its carried journals are malformed", thread_id=thread_id, checkpoint_id=checkpoint_id)
    return {
        key: tuple(
            _entry_from_plain(record, thread_id=thread_id, checkpoint_id=checkpoint_id) for record in value
        )
        for key, value in plain.items()
    }


def encode_chain(chain: Sequence[str]) -> str:
    """A checkpoint's journal chain as JSON text."""
    return dump_plain(list(chain))


def decode_chain(stored: Any, *, thread_id: str | None, checkpoint_id: str | None) -> tuple[str, ...]:
    """The inverse of :func:`encode_chain`."""
    plain = load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table="checkpoints")
    if not isinstance(plain, list) or not all(isinstance(item, str) and item for item in plain):
        raise corrupt("its journal chain is malformed", thread_id=thread_id, checkpoint_id=checkpoint_id)
    return tuple(plain)


# --- a checkpoint's other parts ------------------------------------------------------


# The texts of plans without sends: a loop plans the same nodes superstep
# after superstep, so most plans are encoded once (a bounded number of them).
_PLAN_TEXTS: dict[tuple[tuple[str, str], ...], str] = {}
_PLAN_TEXTS_KEPT = 1024


def encode_next(tasks: Sequence[ScheduledTask]) -> str:
    """The scheduled tasks as JSON text."""
    if any(t.is_send or t.input is not None for t in tasks):
        return _encode_tasks(tasks)
    key = tuple((t.node, t.task_key) for t in tasks)
    text = _PLAN_TEXTS.get(key)
    if text is None:
        text = _encode_tasks(tasks)
        if len(_PLAN_TEXTS) < _PLAN_TEXTS_KEPT:
            _PLAN_TEXTS[key] = text
    return text


def _encode_tasks(tasks: Sequence[ScheduledTask]) -> str:
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


def decode_next(
    stored: Any, *, thread_id: str | None = None, checkpoint_id: str | None = None
) -> tuple[ScheduledTask, ...]:
    """The inverse of :func:`encode_next`."""
    plain = load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table="checkpoints")
    if not isinstance(plain, list):
        raise corrupt("its scheduled tasks are not a list", thread_id=thread_id, checkpoint_id=checkpoint_id)
    tasks = []
    for item in plain:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("node"), str)
            or not isinstance(item.get("task_key"), str)
            or not isinstance(item.get("is_send"), bool)
        ):
            raise corrupt("a scheduled task is malformed", thread_id=thread_id, checkpoint_id=checkpoint_id)
        tasks.append(
            ScheduledTask(
                node=item["node"],
                task_key=item["task_key"],
                is_send=item["is_send"],
                input=revive(item.get("input"), thread_id=thread_id, checkpoint_id=checkpoint_id),
            )
        )
    return tuple(tasks)


def encode_pending(pending: Sequence[Pending]) -> str:
    """The open pauses as JSON text."""
    return dump_plain(
        [
            {
                "id": serde.to_jsonable(p.id, where=f"the pause {p.id!r}"),
                "task_id": serde.to_jsonable(p.task_id, where=f"the pause {p.id!r}"),
                "node": p.node,
                "key": serde.to_jsonable(p.key, where=f"the pause {p.id!r}"),
                "payload": serde.to_jsonable(p.payload, where=f"the payload of pause {p.id!r}"),
            }
            for p in pending
        ]
    )


def decode_pending(
    stored: Any, *, thread_id: str | None = None, checkpoint_id: str | None = None
) -> tuple[Pending, ...]:
    """The inverse of :func:`encode_pending`."""
    plain = load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table="checkpoints")
    if not isinstance(plain, list):
        raise corrupt("its open pauses are not a list", thread_id=thread_id, checkpoint_id=checkpoint_id)
    pauses = []
    for item in plain:
        if not isinstance(item, dict) or not isinstance(item.get("node"), str):
            raise corrupt("an open pause is malformed", thread_id=thread_id, checkpoint_id=checkpoint_id)
        fields = {
            name: revive(item.get(name), thread_id=thread_id, checkpoint_id=checkpoint_id)
            for name in ("id", "task_id", "key")
        }
        if not all(isinstance(value, str) and value for value in fields.values()):
            raise corrupt("an open pause is malformed", thread_id=thread_id, checkpoint_id=checkpoint_id)
        pauses.append(
            Pending(
                id=fields["id"],
                task_id=fields["task_id"],
                node=item["node"],
                key=fields["key"],
                payload=revive(item.get("payload"), thread_id=thread_id, checkpoint_id=checkpoint_id),
            )
        )
    return tuple(pauses)


def decode_metadata(
    stored: Any, *, thread_id: str | None, checkpoint_id: str | None = None, table: str = "checkpoints"
) -> dict[str, Any]:
    """Stored metadata (of a checkpoint or a thread): an object."""
    value = decode_value(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table=table)
    if not isinstance(value, dict):
        raise corrupt(
            "its metadata is not an object", thread_id=thread_id, checkpoint_id=checkpoint_id, table=table
        )
    return value


#: At most this many characters of a failure's traceback are stored (its last lines: where it was raised).
MAX_TRACEBACK = 20_000


def encode_thread_error(error: ThreadError) -> str:
    """Why a run failed, as JSON text (through the serializer: any text is storable, NUL included)."""
    traceback = error.traceback
    if traceback is not None and len(traceback) > MAX_TRACEBACK:
        traceback = "...\n" + traceback[-MAX_TRACEBACK:]
    return serde.encode(
        {
            "kind": "error",
            "type": error.type,
            "message": error.message,
            "node": error.node,
            "checkpoint_id": error.checkpoint_id,
            "at": error.at.timestamp(),
            "traceback": traceback,
            "tasks": list(error.tasks),
        },
        where="the failure record",
    )


def encode_thread_cancel(cancel: ThreadCancel) -> str:
    """How a run was cancelled, as JSON text (stored where a failure would be)."""
    return serde.encode(
        {
            "kind": "cancelled",
            "reason": cancel.reason,
            "checkpoint_id": cancel.checkpoint_id,
            "at": cancel.at.timestamp(),
        },
        where="the cancel record",
    )


def _text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def decode_thread_outcome(stored: Any, *, thread_id: str) -> ThreadError | ThreadCancel | None:
    """The last run's failure or cancel stored with a thread (``None``: neither).

    A record written before records had a ``kind`` is a failure.

    Raises:
        CorruptCheckpointError: the record is not one ilmek writes (a key
            missing, a value of the wrong type, an impossible time).
    """
    if stored is None:
        return None
    plain = revive(
        load_plain(stored, thread_id=thread_id, table="threads"), thread_id=thread_id, table="threads"
    )
    if not isinstance(plain, dict):
        raise corrupt("its stored outcome is malformed", thread_id=thread_id, table="threads")
    kind = plain.get("kind", "error")
    at = plain.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        raise corrupt("its stored outcome has no time", thread_id=thread_id, table="threads")
    try:
        moment = _dt.datetime.fromtimestamp(at, _dt.UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise corrupt(
            "its stored outcome has an impossible time", thread_id=thread_id, table="threads"
        ) from exc
    checkpoint_id = plain.get("checkpoint_id")
    if kind == "cancelled":
        reason = plain.get("reason")
        if not isinstance(reason, str) or not _text_or_none(checkpoint_id):
            raise corrupt("its stored cancel is malformed", thread_id=thread_id, table="threads")
        return ThreadCancel(reason=reason, checkpoint_id=checkpoint_id, at=moment)
    fields = [plain.get(name) for name in ("type", "message", "node", "traceback")]
    if (
        kind != "error"
        or not isinstance(fields[0], str)
        or not isinstance(fields[1], str)
        or not all(_text_or_none(value) for value in (fields[2], fields[3], checkpoint_id))
    ):
        raise corrupt("its stored failure is malformed", thread_id=thread_id, table="threads")
    # Records written before failures named their tasks have none.
    tasks = plain.get("tasks", [])
    if not isinstance(tasks, list) or not all(isinstance(key, str) for key in tasks):
        raise corrupt("its stored failure names its tasks wrongly", thread_id=thread_id, table="threads")
    return ThreadError(
        type=fields[0],
        message=fields[1],
        node=fields[2],
        checkpoint_id=checkpoint_id,
        at=moment,
        traceback=fields[3],
        tasks=tuple(tasks),
    )


def decode_thread_error(stored: Any, *, thread_id: str) -> ThreadError | None:
    """The last run's failure stored with a thread (``None``: none, or the record is a cancel)."""
    outcome = decode_thread_outcome(stored, thread_id=thread_id)
    return outcome if isinstance(outcome, ThreadError) else None


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
        # Stored as text, indexed with the thread: NUL (which Postgres cannot
        # store) and lone surrogates are refused on every backend alike.
        checks.text(name, "a channel name")
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


def check_metadata_filter(metadata: Any) -> dict[str, Any]:
    """A ``list_threads(metadata=...)`` filter: a mapping with plain-text keys."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidArgumentError(f"metadata must be a dict, got {type(metadata).__name__}")
    for key in metadata:
        if not checks.is_plain_text(key):
            raise InvalidArgumentError(
                f"metadata filter keys must be text without NUL or lone surrogates (as stored keys are), "
                f"got {key!r}"
            )
    return dict(metadata)


def encode_thread_metadata(thread_id: str, metadata: Mapping[str, Any]) -> str:
    """A thread's metadata as JSON text; its keys must be plain text, since filters query them.

    Raises:
        InvalidArgumentError: not a mapping, or a key that is not a string, or holds NUL or a
            lone surrogate.
    """
    if not isinstance(metadata, Mapping):
        raise InvalidArgumentError(
            f"metadata of thread {thread_id!r} must be a dict, got {type(metadata).__name__}"
        )
    for key in metadata:
        if not checks.is_plain_text(key):
            raise InvalidArgumentError(
                f"metadata keys of thread {thread_id!r} must be text without NUL or lone surrogates "
                f"(list_threads filters by them), got {key!r}"
            )
    return serde.encode(dict(metadata), where=f"the metadata of thread {thread_id!r}")


def check_thread(thread_id: str, checkpoint: Checkpoint) -> None:
    """Refuse a checkpoint put under another thread's id."""
    if not isinstance(checkpoint, Checkpoint):
        raise InvalidArgumentError(f"expected a Checkpoint, got {type(checkpoint).__name__}")
    if checkpoint.thread_id != thread_id:
        raise InvalidArgumentError(
            f"checkpoint {checkpoint.id!r} belongs to thread {checkpoint.thread_id!r}, not {thread_id!r}"
        )


def encode_fields(checkpoint: Checkpoint) -> dict[str, str]:
    """A checkpoint's non-channel parts as JSON text, keyed by stored column name."""
    # Most checkpoints carry no pause, no journals and no chain: skip the encoder for those.
    return {
        "next_text": encode_next(checkpoint.next) if checkpoint.next else "[]",
        "pending_text": encode_pending(checkpoint.pending) if checkpoint.pending else "[]",
        "journals_text": encode_task_journals(checkpoint.task_journals) if checkpoint.task_journals else "{}",
        "chain_text": encode_chain(checkpoint.journal_chain) if checkpoint.journal_chain else "[]",
        "metadata_text": serde.encode(
            dict(checkpoint.metadata), where=f"the metadata of checkpoint {checkpoint.id!r}"
        ),
    }
