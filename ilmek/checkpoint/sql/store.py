"""The channel-storage primitives of :mod:`ilmek.checkpoint._delta` as queries in one session.

:mod:`~ilmek.checkpoint._delta` holds the algorithm (blobs for whole values,
logs of items for lists, forks sharing their ancestors' items); this module
only says how each primitive reads or writes rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...dbapi import Session
from .._delta import LogInfo
from .._sealing import Sealer
from .rows import stored_int
from .statements import Statements, chunks

__all__ = ["SqlDeltaStore"]

#: Rows per multi-row insert or ranged read.
_ROWS = 100


class SqlDeltaStore:
    """The delta primitives as queries inside one session."""

    def __init__(self, statements: Statements, session: Session, sealer: Sealer) -> None:
        self._statements = statements
        self._session = session
        self.sealer = sealer

    def insert_blob(self, thread_id: str, channel: str, origin: str, text: str) -> int:
        rows = self._session.query(
            self._statements.named("insert_blob"),
            thread_id=thread_id,
            channel=channel,
            origin=origin,
            value=text,
        )
        return int(rows[0][0])

    def fetch_blobs(self, thread_id: str, blob_ids: Sequence[int]) -> dict[int, tuple[str | None, Any]]:
        template = (
            "SELECT blob_id, origin, {jo_value} FROM {p}_blobs "
            "WHERE thread_id = :thread_id AND blob_id IN ({in})"
        )
        found: dict[int, tuple[str | None, Any]] = {}
        for chunk in chunks(blob_ids):
            rows = self._session.query(
                self._statements.built(template, len(chunk)),
                thread_id=thread_id,
                **self._statements.in_params(chunk),
            )
            for blob_id, origin, value in rows:
                found[int(blob_id)] = (origin, value)
        return found

    def create_log(self, thread_id: str, channel: str, parent_id: int | None, base: int, length: int) -> int:
        rows = self._session.query(
            self._statements.named("insert_log"),
            thread_id=thread_id,
            channel=channel,
            parent_id=parent_id,
            base=base,
            length=length,
        )
        return int(rows[0][0])

    def append_items(
        self, thread_id: str, log_id: int, start: int, origin: str, texts: Sequence[str]
    ) -> bool:
        claimed = self._session.query(
            self._statements.named("append_item"),
            thread_id=thread_id,
            log_id=log_id,
            idx=start,
            origin=origin,
            value=texts[0],
        )
        if not claimed:
            return False
        if len(texts) > 1:
            self.insert_items(thread_id, log_id, start + 1, origin, texts[1:])
        return True

    def insert_items(
        self, thread_id: str, log_id: int, start: int, origin: str, texts: Sequence[str]
    ) -> None:
        json_in = self._statements.dialect.JSON_IN
        for offset in range(0, len(texts), _ROWS):
            chunk = texts[offset : offset + _ROWS]
            values = ", ".join(
                f"(:log_id, :i{n}, :origin, {json_in.format(f':t{n}')})" for n in range(len(chunk))
            )
            params: dict[str, Any] = {"log_id": log_id, "origin": origin}
            for n, text in enumerate(chunk):
                params[f"i{n}"] = start + offset + n
                params[f"t{n}"] = text
            statement = self._statements.built(
                f"INSERT INTO {{p}}_items (log_id, idx, origin, value) VALUES {values}"
            )
            self._session.execute(statement, **params)

    def fetch_logs(self, thread_id: str) -> dict[int, LogInfo]:
        rows = self._session.query(self._statements.named("logs"), thread_id=thread_id)
        logs: dict[int, LogInfo] = {}
        for row in rows:
            log_id, parent_id, base = (
                stored_int(row[0], thread_id=thread_id, table="logs"),
                None if row[1] is None else stored_int(row[1], thread_id=thread_id, table="logs"),
                stored_int(row[2], thread_id=thread_id, table="logs"),
            )
            logs[log_id] = LogInfo(log_id, parent_id, base)
        return logs

    def fetch_items(
        self, thread_id: str, spans: Sequence[tuple[int, int, int]]
    ) -> dict[int, list[tuple[int, str | None, Any]]]:
        found: dict[int, list[tuple[int, str | None, Any]]] = {}
        for start in range(0, len(spans), _ROWS):
            chunk = spans[start : start + _ROWS]
            # Scoped by thread in SQL too: a manifest naming another thread's
            # log (a forged row) reads nothing of that thread.
            clauses = " OR ".join(
                f"(i.log_id = :l{n} AND i.idx >= :s{n} AND i.idx < :e{n})" for n in range(len(chunk))
            )
            params: dict[str, Any] = {"thread_id": thread_id}
            for n, (log_id, lower, upper) in enumerate(chunk):
                params[f"l{n}"], params[f"s{n}"], params[f"e{n}"] = log_id, lower, upper
            statement = self._statements.built(
                "SELECT i.log_id, i.idx, i.origin, {jo_i_value} FROM {p}_items AS i "
                "JOIN {p}_logs AS l ON l.log_id = i.log_id "
                f"WHERE l.thread_id = :thread_id AND ({clauses}) ORDER BY i.log_id, i.idx"
            )
            for log_id, index, origin, value in self._session.query(statement, **params):
                found.setdefault(int(log_id), []).append((int(index), origin, value))
        return found
