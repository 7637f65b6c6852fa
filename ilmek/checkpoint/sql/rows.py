"""Stored rows read back as value objects: times, integers, checkpoints and thread summaries.

Every row a query returns passes through here before anything else uses it,
so a damaged column is a :class:`~ilmek.errors.CorruptCheckpointError`
naming the thread and table, never a raw ``KeyError`` or ``TypeError``.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...types import Checkpoint, ThreadCancel, ThreadError, ThreadInfo
from .. import _outcomes, _records
from .._sealing import PLAIN, Sealer
from ..holds import holder_of

__all__ = ["checkpoint_from_row", "epoch", "moment", "stored_int", "thread_from_row"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def epoch(moment: _dt.datetime) -> float:
    """A datetime as epoch seconds (a naive one is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return moment.timestamp()


def moment(stored: Any, *, thread_id: str, table: str) -> _dt.datetime:
    """A stored time as an aware datetime, rounded *down* to the microsecond.

    Stored times have digits below the microsecond. Rounding to the nearest
    one could report a time later than the stored one, and that time handed
    back as a bound (``updated_before=info.updated_at``) would then count the
    thread as before it: rounded down, a reported time is never later.
    """
    try:
        seconds = float(stored)
        found = _EPOCH + _dt.timedelta(microseconds=math.floor(seconds * 1_000_000))
        if found.timestamp() > seconds:
            # The product rounded up across a microsecond: the moment as a
            # bound (converted back with timestamp()) would be after the time.
            found -= _dt.timedelta(microseconds=1)
        return found
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise _records.corrupt(
            f"a stored time ({stored!r}) is impossible", thread_id=thread_id, table=table
        ) from exc


def stored_int(value: Any, *, thread_id: str, table: str) -> int:
    """A stored integer column, or CorruptCheckpointError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _records.corrupt(
            f"a stored number ({value!r}) is not an integer", thread_id=thread_id, table=table
        )
    return value


def checkpoint_from_row(
    thread_id: str, row: Sequence[Any], channels: Mapping[str, Any], sealer: Sealer = PLAIN
) -> Checkpoint:
    """A checkpoint row (``CHECKPOINT_COLUMNS``) with its channel values, its stored values opened."""
    checkpoint_id = row[0]
    where = {"thread_id": thread_id, "checkpoint_id": checkpoint_id}
    if not isinstance(checkpoint_id, str) or not isinstance(row[1], (str, type(None))):
        raise _records.corrupt("its id or parent id is not text", **where)
    return Checkpoint(
        id=checkpoint_id,
        thread_id=thread_id,
        parent_id=row[1],
        plan_id=row[2] if isinstance(row[2], str) else None,
        step=stored_int(row[3], thread_id=thread_id, table="checkpoints"),
        ts=moment(row[4], thread_id=thread_id, table="checkpoints"),
        channels=channels,
        next=_records.decode_next(row[6], sealer=sealer, **where),
        pending=_records.decode_pending(row[7], sealer=sealer, **where),
        task_journals=_records.decode_task_journals(row[8], sealer=sealer, **where),
        journal_chain=_records.decode_chain(row[9], **where),
        metadata=_records.decode_metadata(row[10], **where),
    )


def thread_from_row(row: Sequence[Any], sealer: Sealer = PLAIN) -> ThreadInfo:
    """A thread row joined with its live hold (``THREAD_COLUMNS``); a failure's sealed message opened."""
    thread_id = row[0]
    if not isinstance(thread_id, str):
        raise _records.corrupt("a thread id is not text", thread_id=None, table="threads")
    status = row[3]
    if status not in ("done", "interrupted", "unfinished", "error"):
        raise _records.corrupt(f"its status {status!r} is unknown", thread_id=thread_id, table="threads")
    held_since = row[8]
    outcome = _outcomes.decode_thread_outcome(row[7], thread_id=thread_id, sealer=sealer)
    return ThreadInfo(
        id=thread_id,
        created_at=moment(row[1], thread_id=thread_id, table="threads"),
        updated_at=moment(row[2], thread_id=thread_id, table="threads"),
        status=status,
        step=stored_int(row[4], thread_id=thread_id, table="threads"),
        checkpoint_id=row[5] if isinstance(row[5], str) else None,
        metadata=_records.decode_metadata(row[6], thread_id=thread_id, table="threads"),
        error=outcome if status == "error" and isinstance(outcome, ThreadError) else None,
        running=held_since is not None,
        held_since=moment(held_since, thread_id=thread_id, table="holds") if held_since is not None else None,
        held_by=holder_of(row[9]) if held_since is not None else None,
        cancelled=outcome if isinstance(outcome, ThreadCancel) else None,
        due_at=moment(row[10], thread_id=thread_id, table="threads") if row[10] is not None else None,
    )
