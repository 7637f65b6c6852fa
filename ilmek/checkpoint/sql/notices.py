"""The notice outbox in SQL: rows written with a pause's commit, read by due time, taken out by id.

The table holds only notices not yet delivered, so its index on the due
time stays as small as the work waiting, whatever the number of threads.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from ... import checks
from ..outbox import OutboxNotice

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer
    from .statements import Statements

__all__ = ["ADD_NOTICE", "NoticeRows", "notice_params", "notices_table"]

ADD_NOTICE = (
    "INSERT INTO {p}_notices (notice_id, thread_id, checkpoint_id, pause_id, graph, due_at, attempts)"
    " VALUES (:notice_id, :thread_id, :checkpoint_id, :pause_id, :graph, :due_at, 0)"
    " ON CONFLICT (notice_id) DO NOTHING"
)
_DUE = (
    "SELECT notice_id, thread_id, checkpoint_id, pause_id, graph, due_at, attempts FROM {p}_notices"
    " WHERE due_at <= :now ORDER BY due_at, notice_id LIMIT :limit"
)
_DELIVERED = "DELETE FROM {p}_notices WHERE notice_id = :notice_id"
_FAILED = "UPDATE {p}_notices SET attempts = attempts + 1, due_at = :retry_at WHERE notice_id = :notice_id"


def notices_table(text: str, real: str) -> list[str]:
    """The outbox's DDL, with the dialect's text and floating-point types."""
    return [
        f"CREATE TABLE IF NOT EXISTS {{p}}_notices (notice_id TEXT PRIMARY KEY, thread_id {text} NOT NULL,"
        f" checkpoint_id {text} NOT NULL, pause_id TEXT NOT NULL, graph TEXT NOT NULL,"
        f" due_at {real} NOT NULL, attempts INTEGER NOT NULL DEFAULT 0)",
        "CREATE INDEX IF NOT EXISTS {p}_notices_due ON {p}_notices (due_at, notice_id)",
    ]


def notice_params(notice: OutboxNotice) -> dict[str, Any]:
    """The parameters of :data:`ADD_NOTICE` for one notice."""
    return {
        "notice_id": notice.id,
        "thread_id": notice.thread_id,
        "checkpoint_id": notice.checkpoint_id,
        "pause_id": notice.pause_id,
        "graph": notice.graph,
        "due_at": notice.due_at,
    }


class NoticeRows:
    """Reads and settles the outbox of one SQL checkpointer."""

    def __init__(self, owner: SqlCheckpointer, statements: Statements) -> None:
        self._owner = owner
        self._statements = statements

    def due(self, now: float, limit: int | None) -> builtins.list[OutboxNotice]:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.due_notices`."""
        count = checks.count(limit, "limit", optional=True)
        rows = self._owner.transact(
            lambda session: session.query(
                self._statements.built(_DUE),
                now=float(now),
                limit=checks.MAX_LIMIT if count is None else count,
            ),
            what="read the due pause notices",
            write=False,
        )
        return [
            OutboxNotice(
                id=row[0],
                thread_id=row[1],
                checkpoint_id=row[2],
                pause_id=row[3],
                graph=row[4],
                due_at=float(row[5]),
                attempts=int(row[6]),
            )
            for row in rows
        ]

    def delivered(self, notice_id: str) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.notice_delivered`."""
        self._settle(_DELIVERED, "mark a pause notice delivered", notice_id=notice_id)

    def failed(self, notice_id: str, retry_at: float) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.notice_failed`."""
        self._settle(_FAILED, "put a pause notice off", notice_id=notice_id, retry_at=float(retry_at))

    def _settle(self, template: str, what: str, **params: Any) -> None:
        self._owner.transact(
            lambda session: session.execute(self._statements.built(template), **params), what=what, alone=True
        )
