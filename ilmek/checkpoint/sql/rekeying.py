"""Rotation on SQL: every stored value resealed under the current key, in batches, online.

Each table with sealed values is walked in primary-key order, ``batch``
rows per transaction of its own, so a run waits at most one batch for the
table lock (SQLite) or never (Postgres rows). A row already sealed under
the current key alone is left untouched, so a rekey run again, or resumed
after it was killed, only finishes the work. Rows that can change while a
run goes on (a journal entry answered, a thread's failure record) are
updated only if they still hold what was read; the others never change once
written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ...crypto import RekeyProgress
from ...dbapi import Session
from .._rekeying import Resealer
from .statements import Statements

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["Rekeying"]

Rewrite = Callable[[Resealer, Sequence[Any]], "dict[str, Any] | None"]


@attrs.frozen
class _Table:
    """How one table's rows are read in key order, resealed and written back."""

    name: str
    select: str
    update: str
    keys: tuple[str, ...]
    rewrite: Rewrite


def _blob(resealer: Resealer, row: Sequence[Any]) -> dict[str, Any] | None:
    blob_id, thread_id, channel, origin, value = row
    found = resealer.channel_value(value, thread_id, channel, origin, row=f"blob {blob_id}")
    return None if found is None else {"origin": found[0], "value": found[1]}


def _item(resealer: Resealer, row: Sequence[Any]) -> dict[str, Any] | None:
    log_id, index, thread_id, channel, origin, value = row
    found = resealer.channel_value(value, thread_id, channel, origin, index=int(index), row=f"log {log_id}")
    return None if found is None else {"origin": found[0], "value": found[1]}


def _entry(resealer: Resealer, row: Sequence[Any]) -> dict[str, Any] | None:
    text = resealer.entry(row[4], row[1], row[2], row[3])
    return None if text is None else {"entry": text, "old": row[4]}


def _checkpoint(resealer: Resealer, row: Sequence[Any]) -> dict[str, Any] | None:
    parts = resealer.checkpoint_parts((row[2], row[3], row[4]), row[0], row[1])
    return None if parts is None else dict(zip(("next", "pending", "task_journals"), parts, strict=True))


def _outcome(resealer: Resealer, row: Sequence[Any]) -> dict[str, Any] | None:
    text = resealer.outcome(row[1], row[0])
    return None if text is None else {"error": text, "old": row[1]}


def _tables(json_in: str) -> list[_Table]:
    old = json_in.format(":old")
    return [
        _Table(
            "blobs",
            "SELECT blob_id, thread_id, channel, origin, {jo_value} FROM {p}_blobs WHERE blob_id > :k0 "
            "ORDER BY blob_id LIMIT :batch",
            "UPDATE {p}_blobs SET origin = :origin, value = {ji_value} WHERE blob_id = :k0",
            ("blob_id",),
            _blob,
        ),
        _Table(
            "items",
            "SELECT i.log_id, i.idx, l.thread_id, l.channel, i.origin, {jo_i_value} FROM {p}_items AS i "
            "JOIN {p}_logs AS l ON l.log_id = i.log_id "
            "WHERE i.log_id > :k0 OR (i.log_id = :k0 AND i.idx > :k1) "
            "ORDER BY i.log_id, i.idx LIMIT :batch",
            "UPDATE {p}_items SET origin = :origin, value = {ji_value} WHERE log_id = :k0 AND idx = :k1",
            ("log_id", "idx"),
            _item,
        ),
        _Table(
            "journals",
            "SELECT entry_id, thread_id, base_id, task_key, {jo_entry} FROM {p}_journals "
            "WHERE entry_id > :k0 ORDER BY entry_id LIMIT :batch",
            "UPDATE {p}_journals SET entry = {ji_entry} WHERE entry_id = :k0 AND entry = " + old,
            ("entry_id",),
            _entry,
        ),
        _Table(
            "checkpoints",
            "SELECT thread_id, checkpoint_id, {jo_next}, {jo_pending}, {jo_task_journals} "
            "FROM {p}_checkpoints WHERE thread_id > :k0 OR (thread_id = :k0 AND checkpoint_id > :k1) "
            "ORDER BY thread_id, checkpoint_id LIMIT :batch",
            "UPDATE {p}_checkpoints SET next = {ji_next}, pending = {ji_pending}, "
            "task_journals = {ji_task_journals} WHERE thread_id = :k0 AND checkpoint_id = :k1",
            ("thread_id", "checkpoint_id"),
            _checkpoint,
        ),
        _Table(
            "threads",
            "SELECT thread_id, {jo_error} FROM {p}_threads WHERE thread_id > :k0 AND error IS NOT NULL "
            "ORDER BY thread_id LIMIT :batch",
            "UPDATE {p}_threads SET error = {ji_error} WHERE thread_id = :k0 AND error = " + old,
            ("thread_id",),
            _outcome,
        ),
    ]


class Rekeying:
    """The rekey of one SQL store."""

    def __init__(self, owner: SqlCheckpointer, statements: Statements) -> None:
        self._owner = owner
        self._statements = statements

    def run(self, batch: int, progress: Callable[[RekeyProgress], None] | None) -> RekeyProgress:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.rekey`."""
        resealer = Resealer(self._owner.sealer)
        done = RekeyProgress()
        for table in _tables(self._owner.JSON_IN):
            after = _lowest(len(table.keys), table.name)
            while True:
                work = functools.partial(
                    self._batch, table=table, resealer=resealer, after=after, batch=batch
                )
                checked, changed, after = self._owner.transact(work, what=f"rekey the {table.name}")
                if not checked:
                    break
                done = attrs.evolve(
                    done,
                    checked=done.checked + checked,
                    rewritten=done.rewritten + changed,
                    batches=done.batches + 1,
                    table=table.name,
                )
                if progress is not None:
                    progress(done)
                if checked < batch:
                    break
        return attrs.evolve(done, table=None)

    def _batch(
        self, session: Session, *, table: _Table, resealer: Resealer, after: tuple[Any, ...], batch: int
    ) -> tuple[int, int, tuple[Any, ...]]:
        """One transaction: the next ``batch`` rows after key ``after``, resealed where needed."""
        keys = {f"k{n}": value for n, value in enumerate(after)}
        rows = session.query(self._statements.built(table.select), batch=batch, **keys)
        changed = 0
        for row in rows:
            params = table.rewrite(resealer, row)
            if params is not None:
                row_keys = {f"k{n}": row[n] for n in range(len(after))}
                session.execute(self._statements.built(table.update), **params, **row_keys)
                changed += 1
        return len(rows), changed, tuple(rows[-1][: len(after)]) if rows else after


def _lowest(count: int, table: str) -> tuple[Any, ...]:
    """Keys below every stored row's: ids start at 1, text at the empty string."""
    if table in ("checkpoints", "threads"):
        return ("",) * count
    return (-1,) * count
