"""A thread's last outcome as stored text, and back: a failed run's record or a cancel's.

The record keeps the failure's type, message, node, checkpoint, time,
traceback and the tasks that raised (or a cancel's reason); the message,
the traceback and the reason are sealed with a keyring, the rest stays
readable for listing and filtering.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from .. import crypto, serde
from ..types import ThreadCancel, ThreadError
from ._records import corrupt, dump_plain, load_plain, revive
from ._sealing import PLAIN, Sealer, Slot

__all__ = [
    "MAX_TRACEBACK",
    "decode_thread_error",
    "decode_thread_outcome",
    "encode_thread_cancel",
    "encode_thread_error",
]


#: At most this many characters of a failure's traceback are stored (its last lines: where it was raised).
MAX_TRACEBACK = 20_000


#: The fields of a failure or cancel record that are sealed (the rest are ids, names and times).
_SEALED_OUTCOME_FIELDS = ("message", "traceback", "reason")


def _outcome_slot(sealer: Sealer, thread_id: str) -> Slot:
    return sealer.slot(thread_id, "outcome")


def _encode_outcome(record: dict[str, Any], slot: Slot, where: str) -> str:
    plain = serde.to_jsonable(record, where=where)
    for name in _SEALED_OUTCOME_FIELDS:
        if name in plain:
            plain[name] = slot.seal(plain[name], name)
    return dump_plain(plain)


def encode_thread_error(error: ThreadError, sealer: Sealer = PLAIN, thread_id: str = "") -> str:
    """Why a run failed, as JSON text (through the serializer: any text is storable, NUL included).

    Its message and traceback are sealed to the thread when ``sealer`` has a keyring.
    """
    traceback = error.traceback
    if traceback is not None and len(traceback) > MAX_TRACEBACK:
        traceback = "...\n" + traceback[-MAX_TRACEBACK:]
    record = {
        "kind": "error",
        "type": error.type,
        "message": error.message,
        "node": error.node,
        "checkpoint_id": error.checkpoint_id,
        "at": error.at.timestamp(),
        "traceback": traceback,
        "tasks": list(error.tasks),
    }
    return _encode_outcome(record, _outcome_slot(sealer, thread_id), "the failure record")


def encode_thread_cancel(cancel: ThreadCancel, sealer: Sealer = PLAIN, thread_id: str = "") -> str:
    """How a run was cancelled, as JSON text (stored where a failure would be; its reason sealed)."""
    record = {
        "kind": "cancelled",
        "reason": cancel.reason,
        "checkpoint_id": cancel.checkpoint_id,
        "at": cancel.at.timestamp(),
    }
    return _encode_outcome(record, _outcome_slot(sealer, thread_id), "the cancel record")


def _text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def decode_thread_outcome(
    stored: Any, *, thread_id: str, sealer: Sealer = PLAIN
) -> ThreadError | ThreadCancel | None:
    """The last run's failure or cancel stored with a thread (``None``: neither).

    A record written before records had a ``kind`` is a failure.

    Raises:
        CorruptCheckpointError: the record is not one ilmek writes (a key
            missing, a value of the wrong type, an impossible time).
    """
    if stored is None:
        return None
    loaded = load_plain(stored, thread_id=thread_id, table="threads")
    if isinstance(loaded, dict) and not crypto.is_sealed(loaded):
        slot = _outcome_slot(sealer, thread_id)
        opened = {
            name: slot.open(value, name, table="threads") if name in _SEALED_OUTCOME_FIELDS else value
            for name, value in loaded.items()
        }
        shown = {name: value for name, value in opened.items() if isinstance(value, crypto.Sealed)}
        loaded = {name: value for name, value in opened.items() if name not in shown}
    else:
        shown = {}
    plain = revive(loaded, thread_id=thread_id, table="threads")
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
    # Shown without a keyring, a sealed message reads as its label.
    plain.update({name: value.label for name, value in shown.items()})
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


def decode_thread_error(stored: Any, *, thread_id: str, sealer: Sealer = PLAIN) -> ThreadError | None:
    """The last run's failure stored with a thread (``None``: none, or the record is a cancel)."""
    outcome = decode_thread_outcome(stored, thread_id=thread_id, sealer=sealer)
    return outcome if isinstance(outcome, ThreadError) else None
