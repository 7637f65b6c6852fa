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

from .. import checks, crypto, serde
from ..errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    InvalidArgumentError,
    SerializationError,
    stored_at,
)
from ..predicates import json_equal
from ..types import (
    ChannelChange,
    Checkpoint,
    Extend,
    JournalEntry,
    Pending,
    Replace,
    ScheduledTask,
)
from ._sealing import PLAIN, Sealer, Slot

__all__ = [
    "EncodedChange",
    "channel_slot",
    "check_metadata_filter",
    "check_thread",
    "corrupt",
    "decode_chain",
    "decode_entry",
    "decode_journal",
    "decode_metadata",
    "decode_next",
    "decode_pending",
    "decode_stored_value",
    "decode_task_journals",
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
    "encode_thread_metadata",
    "gone_error",
    "journal_slot",
    "json_equal",
    "load_plain",
    "metadata_matches",
    "open_value",
    "revive",
    "same_plan_and_pauses",
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
    return CorruptCheckpointError(
        f"stored data of {stored_at(thread_id, checkpoint_id, table)} is malformed: {problem}. "
        "It was not written by this ilmek or was damaged: restore it from a backup, "
        "fork from an earlier checkpoint, or delete the thread",
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


def open_value(
    slot: Slot,
    stored: Any,
    *more: str,
    thread_id: str | None,
    checkpoint_id: str | None = None,
    table: str | None = None,
) -> Any:
    """A stored value (parsed JSON) opened at its place, then revived.

    Shown without a keyring (in a display context), a sealed value is a
    :class:`~ilmek.crypto.Sealed` placeholder.
    """
    opened = slot.open(stored, *more, checkpoint_id=checkpoint_id, table=table)
    if isinstance(opened, crypto.Sealed):
        return opened
    return revive(opened, thread_id=thread_id, checkpoint_id=checkpoint_id, table=table)


def decode_stored_value(slot: Slot, stored: Any, *more: str, thread_id: str, table: str) -> Any:
    """A whole stored row's value (a blob, a list item) from its JSON text, opened and checked."""
    return open_value(
        slot, load_plain(stored, thread_id=thread_id, table=table), *more, thread_id=thread_id, table=table
    )


# --- journal entries ----------------------------------------------------------------


# Who may have answered (None: a journal written before ilmek kept it).
_ANSWERED_BY = (None, "person", "deadline", "token", "timer")


def _entry_to_plain(entry: JournalEntry, where: str, slot: Slot) -> dict[str, Any]:
    # Keys are the author's text and may hold NUL, which JSONB refuses bare.
    # The key and kind stay readable; the value and payload are sealed at (slot, key, field).
    record: dict[str, Any] = {"key": serde.to_jsonable(entry.key, where=where), "kind": entry.kind}
    if entry.kind == "step" or entry.answered:
        record["value"] = slot.seal(
            serde.to_jsonable(entry.value, where=f"{where} step {entry.key!r}"), entry.key, "value"
        )
    if entry.kind == "interrupt":
        record["payload"] = slot.seal(
            serde.to_jsonable(entry.payload, where=f"{where} interrupt {entry.key!r}"), entry.key, "payload"
        )
        record["answered"] = entry.answered
        if entry.by is not None:
            record["by"] = entry.by
    elif entry.kind == "unstored":
        record["payload"] = serde.to_jsonable(entry.payload, where=f"{where} step {entry.key!r}")
    return record


def _entry_from_plain(
    record: Any, *, thread_id: str | None, checkpoint_id: str | None, slot: Slot
) -> JournalEntry:
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
    by = record.get("by")
    if by not in _ANSWERED_BY:
        raise bad(f"names an unknown answerer {by!r}")
    where = {"thread_id": thread_id, "checkpoint_id": checkpoint_id, "table": "journals"}
    # What was never stored is not sealed either: a step's missing payload, an open pause's answer.
    return JournalEntry(
        key=key,
        kind=kind,
        value=open_value(slot, record["value"], key, "value", **where) if "value" in record else None,
        payload=open_value(slot, record["payload"], key, "payload", **where) if "payload" in record else None,
        answered=answered,
        by=by,
    )


def stored_key(key: str) -> str:
    """A journal key as its row stores it, for uniqueness only: JSON-escaped ASCII.

    The author's key may hold NUL or a lone surrogate, which a text column
    cannot; the escaped form can, and two keys never share one. The entry
    itself carries the key as it was.
    """
    return json.dumps(key, ensure_ascii=True)


def journal_slot(sealer: Sealer, thread_id: str, base_id: str, task_key: str) -> Slot:
    """Where the entries of one task's own journal are sealed: its thread, base checkpoint and task key."""
    return sealer.slot(thread_id, "step", base_id, task_key)


def encode_entry(entry: JournalEntry, where: str, slot: Slot | None = None) -> str:
    """One journal entry as JSON text (one stored row); ``slot`` (see :func:`journal_slot`) seals it.

    Raises:
        SerializationError: the entry's value cannot be stored.
    """
    return dump_plain(_entry_to_plain(entry, where, slot or PLAIN.slot("", "step")))


def decode_entry(
    stored: Any, *, thread_id: str | None, checkpoint_id: str | None = None, slot: Slot | None = None
) -> JournalEntry:
    """One journal entry from its stored row, opened at ``slot`` (see :func:`journal_slot`)."""
    plain = load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table="journals")
    return _entry_from_plain(
        plain, thread_id=thread_id, checkpoint_id=checkpoint_id, slot=slot or PLAIN.slot("", "step")
    )


def encode_journal(task_id: str, entries: Sequence[JournalEntry]) -> str:
    """A task's journal as JSON text (unsealed: the stored form of schema version 1, and a check)."""
    slot = PLAIN.slot("", "step")
    return dump_plain([_entry_to_plain(entry, f"journal {task_id!r}", slot) for entry in entries])


def decode_journal(stored: Any, *, thread_id: str | None = None) -> tuple[JournalEntry, ...]:
    """A journal from its JSON text (or the structure a JSON column returned); schema version 1's form."""
    plain = load_plain(stored, thread_id=thread_id, table="journals")
    if not isinstance(plain, list):
        raise corrupt("a stored journal is not a list", thread_id=thread_id, table="journals")
    slot = PLAIN.slot("", "step")
    return tuple(
        _entry_from_plain(record, thread_id=thread_id, checkpoint_id=None, slot=slot) for record in plain
    )


def encode_task_journals(
    journals: Mapping[str, Sequence[JournalEntry]],
    sealer: Sealer = PLAIN,
    thread_id: str = "",
    checkpoint_id: str = "",
) -> str:
    """Journals carried in a checkpoint, by task key, as JSON text (sealed to that checkpoint)."""
    return dump_plain(
        {
            key: [
                _entry_to_plain(entry, f"task {key!r}", sealer.slot(thread_id, "carried", checkpoint_id, key))
                for entry in entries
            ]
            for key, entries in journals.items()
        }
    )


def decode_task_journals(
    stored: Any, *, thread_id: str | None = None, checkpoint_id: str | None = None, sealer: Sealer = PLAIN
) -> dict[str, tuple[JournalEntry, ...]]:
    """The inverse of :func:`encode_task_journals`."""
    plain = load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id, table="checkpoints")
    if not isinstance(plain, dict) or not all(isinstance(value, list) for value in plain.values()):
        raise corrupt("its carried journals are malformed", thread_id=thread_id, checkpoint_id=checkpoint_id)
    return {
        key: tuple(
            _entry_from_plain(
                record,
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                slot=sealer.slot(thread_id or "", "carried", checkpoint_id or "", key),
            )
            for record in value
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


def encode_next(tasks: Sequence[ScheduledTask], slot: Slot | None = None) -> str:
    """The scheduled tasks as JSON text; ``slot`` (the checkpoint's ``"input"``) seals their inputs."""
    slot = slot or PLAIN.slot("", "input")
    if any(t.is_send or t.input is not None for t in tasks):
        return _encode_tasks(tasks, slot)
    key = tuple((t.node, t.task_key) for t in tasks)
    text = _PLAN_TEXTS.get(key)
    if text is None:
        text = _encode_tasks(tasks, slot)
        if len(_PLAN_TEXTS) < _PLAN_TEXTS_KEPT:
            _PLAN_TEXTS[key] = text
    return text


def _encode_tasks(tasks: Sequence[ScheduledTask], slot: Slot) -> str:
    # A task without input (not a send) stores null, unsealed: it carries nothing,
    # and the reader accepts a bare null only where no input is expected.
    return dump_plain(
        [
            {
                "node": t.node,
                "task_key": t.task_key,
                "is_send": t.is_send,
                "input": None
                if t.input is None and not t.is_send
                else slot.seal(
                    serde.to_jsonable(t.input, where=f"the input of send {t.task_key!r}"), t.task_key
                ),
            }
            for t in tasks
        ]
    )


def decode_next(
    stored: Any, *, thread_id: str | None = None, checkpoint_id: str | None = None, sealer: Sealer = PLAIN
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
        stored_input = item.get("input")
        if stored_input is None and not item["is_send"]:
            task_input = None
        else:
            task_input = open_value(
                sealer.slot(thread_id or "", "input", checkpoint_id or ""),
                stored_input,
                item["task_key"],
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                table="checkpoints",
            )
        tasks.append(
            ScheduledTask(
                node=item["node"], task_key=item["task_key"], is_send=item["is_send"], input=task_input
            )
        )
    return tuple(tasks)


def _pause_to_plain(p: Pending, slot: Slot) -> dict[str, Any]:
    # The payload, the contract and the timeout's answer are sealed at (the pause, field);
    # ids, the kind and the deadline stay readable (SQL reads the deadline to find what is due).
    record = {
        "id": serde.to_jsonable(p.id, where=f"the pause {p.id!r}"),
        "task_id": serde.to_jsonable(p.task_id, where=f"the pause {p.id!r}"),
        "node": p.node,
        "key": serde.to_jsonable(p.key, where=f"the pause {p.id!r}"),
        "payload": slot.seal(serde.to_jsonable(p.payload, where=f"the payload of pause {p.id!r}"), p.id),
    }
    # The contract's fields only where set: a plain pause is stored as before.
    if p.answers is not None:
        record["answers"] = slot.seal(
            serde.to_jsonable(p.answers, where=f"the contract of pause {p.id!r}"), p.id, "answers"
        )
    if p.deadline is not None:
        # Plain epoch seconds, not the codec's tagged datetime.
        record["deadline"] = p.deadline.timestamp()
        record["on_timeout"] = slot.seal(
            serde.to_jsonable(p.on_timeout, where=f"the on_timeout of pause {p.id!r}"), p.id, "on_timeout"
        )
    if p.kind != "person":
        record["kind"] = p.kind
    if p.ns:
        record["ns"] = list(p.ns)
    return record


def encode_pending(pending: Sequence[Pending], slot: Slot | None = None) -> str:
    """The open pauses as JSON text; ``slot`` (the checkpoint's ``"pause"``) seals what they hold."""
    slot = slot or PLAIN.slot("", "pause")
    return dump_plain([_pause_to_plain(p, slot) for p in pending])


def due_at(pending: Sequence[Pending]) -> float | None:
    """The earliest deadline or timer of ``pending`` as epoch seconds (``None``: nothing comes due)."""
    deadlines = [p.deadline.timestamp() for p in pending if p.deadline is not None]
    return min(deadlines) if deadlines else None


def decode_pending(
    stored: Any, *, thread_id: str | None = None, checkpoint_id: str | None = None, sealer: Sealer = PLAIN
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
        slot = sealer.slot(thread_id or "", "pause", checkpoint_id or "")
        pauses.append(
            Pending(
                id=fields["id"],
                task_id=fields["task_id"],
                node=item["node"],
                key=fields["key"],
                payload=open_value(
                    slot,
                    item.get("payload"),
                    fields["id"],
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                    table="checkpoints",
                ),
                **_pause_terms(item, slot, fields["id"], thread_id=thread_id, checkpoint_id=checkpoint_id),
            )
        )
    return tuple(pauses)


def _pause_terms(
    item: dict[str, Any], slot: Slot, pause_id: str, *, thread_id: str | None, checkpoint_id: str | None
) -> dict[str, Any]:
    """A stored pause's contract, deadline, kind and namespace (absent in pauses stored before them)."""

    def opened(field: str) -> Any:
        return open_value(
            slot,
            item[field],
            pause_id,
            field,
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            table="checkpoints",
        )

    contract = opened("answers") if item.get("answers") is not None else None
    deadline = item.get("deadline")
    kind = item.get("kind", "person")
    ns = item.get("ns", [])
    if (
        (contract is not None and not isinstance(contract, dict | crypto.Sealed))
        or (deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int | float)))
        or kind not in ("person", "timer")
        or not isinstance(ns, list)
        or not all(isinstance(part, str) for part in ns)
    ):
        raise corrupt("an open pause's terms are malformed", thread_id=thread_id, checkpoint_id=checkpoint_id)
    return {
        "answers": contract,
        "deadline": None if deadline is None else _dt.datetime.fromtimestamp(deadline, _dt.UTC),
        "on_timeout": opened("on_timeout") if "on_timeout" in item else None,
        "kind": kind,
        "ns": tuple(ns),
    }


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


def channel_slot(
    sealer: Sealer, thread_id: str, channel: str, *, origin: str | None, index: int | None = None
) -> Slot:
    """Where one stored channel value is sealed: a whole value, or the list item at ``index``.

    The value is bound to its thread and channel, to ``origin`` (the
    checkpoint that wrote its row, stored beside the row) and, for an item,
    to its position in the list. A row stored before ilmek recorded its
    origin (``None``) is bound to its thread and channel alone, until
    ``rekey`` reseals it with an origin.
    """
    kind = "value" if index is None else "item"
    if origin is None:
        return sealer.slot(thread_id, kind, channel)
    if index is None:
        return sealer.slot(thread_id, kind, channel, origin)
    return sealer.slot(thread_id, kind, channel, str(index), origin)


@attrs.frozen
class EncodedChange:
    """A channel change with its value or items already encoded as JSON text.

    ``value`` is the stored text (sealed, with a keyring); ``items`` the
    items' JSON text before sealing, since an item is sealed to its position,
    which the write decides (:meth:`stored_items`). ``origin`` is the
    checkpoint that writes the change, recorded beside each row it stores.
    """

    channel: str
    origin: str
    value: str | None = None
    items: tuple[str, ...] | None = None
    sealer: Sealer = PLAIN
    thread_id: str = ""

    def stored_items(self, texts: Sequence[str], start: int) -> list[str]:
        """Items' JSON texts as stored at positions ``start, start + 1, ...`` of the list (sealed there)."""
        if self.sealer.cipher is None:
            return list(texts)
        return [
            channel_slot(
                self.sealer, self.thread_id, self.channel, origin=self.origin, index=start + offset
            ).seal_text(text)
            for offset, text in enumerate(texts)
        ]


def encode_changes(
    changes: Mapping[str, ChannelChange], checkpoint: Checkpoint, sealer: Sealer = PLAIN
) -> list[EncodedChange]:
    """Encode every change ``checkpoint`` writes, so that nothing is written if any cannot be stored.

    With a keyring each whole value is sealed to its thread, channel and
    checkpoint; appended items are sealed by :meth:`EncodedChange.stored_items`
    once their positions are known.

    Raises:
        SerializationError: naming the channel (and item index) and the type.
    """
    thread_id, checkpoint_id = checkpoint.thread_id, checkpoint.id
    encoded: list[EncodedChange] = []
    for name, change in changes.items():
        # Stored as text, indexed with the thread: NUL (which Postgres cannot
        # store) and lone surrogates are refused on every backend alike.
        checks.text(name, "a channel name")
        if isinstance(change, Replace):
            text = serde.encode(change.value, where=f"channel {name!r}")
            slot = channel_slot(sealer, thread_id, name, origin=checkpoint_id)
            encoded.append(EncodedChange(name, checkpoint_id, value=slot.seal_text(text)))
        elif isinstance(change, Extend):
            items = tuple(
                serde.encode(item, where=f"channel {name!r} item {index}")
                for index, item in enumerate(change.items)
            )
            encoded.append(
                EncodedChange(name, checkpoint_id, items=items, sealer=sealer, thread_id=thread_id)
            )
        else:
            raise TypeError(f"unknown channel change {change!r} for channel {name!r}")
    return encoded


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


def same_plan_and_pauses(
    sealer: Sealer, checkpoint: Checkpoint, stored: tuple[Any, Any], fields: Mapping[str, str]
) -> bool:
    """Whether a stored checkpoint's (next, pending) are those :func:`encode_fields` just made.

    For a retried commit meeting itself. Compared opened: sealed texts differ
    on every write (a fresh nonce), and Postgres returns JSON in its own order.
    """
    where = {"thread_id": checkpoint.thread_id, "checkpoint_id": checkpoint.id}
    return decode_next(stored[0], sealer=sealer, **where) == decode_next(
        fields["next_text"], sealer=sealer, **where
    ) and decode_pending(stored[1], sealer=sealer, **where) == decode_pending(
        fields["pending_text"], sealer=sealer, **where
    )


def encode_fields(checkpoint: Checkpoint, sealer: Sealer = PLAIN) -> dict[str, str]:
    """A checkpoint's non-channel parts as JSON text, keyed by stored column name (values sealed)."""
    # Most checkpoints carry no pause, no journals and no chain: skip the encoder for those.
    thread_id, checkpoint_id = checkpoint.thread_id, checkpoint.id
    return {
        "next_text": encode_next(checkpoint.next, sealer.slot(thread_id, "input", checkpoint_id))
        if checkpoint.next
        else "[]",
        "pending_text": encode_pending(checkpoint.pending, sealer.slot(thread_id, "pause", checkpoint_id))
        if checkpoint.pending
        else "[]",
        "journals_text": encode_task_journals(checkpoint.task_journals, sealer, thread_id, checkpoint_id)
        if checkpoint.task_journals
        else "{}",
        "chain_text": encode_chain(checkpoint.journal_chain) if checkpoint.journal_chain else "[]",
        "metadata_text": serde.encode(
            dict(checkpoint.metadata), where=f"the metadata of checkpoint {checkpoint.id!r}"
        ),
    }
