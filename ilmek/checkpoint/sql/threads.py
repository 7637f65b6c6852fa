"""Threads as a whole: listing and reading their summaries, metadata, deleting and pruning.

A delete never pulls a thread from under a live run: the deleting
transaction takes each candidate's hold first (one statement), so a run
that took it since it was listed keeps it, and one that tries now waits
for the delete to commit.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ... import checks
from ...dbapi import Session
from ...logs import logger
from ...namespaces import SEPARATOR, child_of_plans, children_prefix
from ...types import ThreadInfo
from .. import _records
from .._delta import blob_ids, manifest_from_plain
from ..base import checkpoints_to_keep
from ..child_threads import ChildThreads
from ..holds import Hold, busy_error, new_token
from .rows import thread_from_row
from .statements import (
    CHUNK,
    CLAIM_FOR_DELETE,
    LIVE_HOLD,
    THREAD_COLUMNS,
    THREAD_DELETIONS,
    THREADS_DELETIONS,
    Statements,
    chunks,
)

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["ChildThreadReads", "Threads"]

_LOG = logger("ilmek.storage")


_CHILD_PATTERN = f"%{SEPARATOR}%"
"""What the thread id of a subgraph's thread matches (``LIKE``)."""

# Thread ids compare byte by byte on both databases (SQLite's BINARY, Postgres's
# COLLATE "C"), so a range on the primary key finds exactly the ids starting with
# a prefix that ends in the separator, through the index. (A LIKE ignores case on
# SQLite, so it cannot use one, and once found the children of "order" for "ORDER".)

# Every subgraph thread under a root, at any depth.
_CHILDREN_OF = "SELECT thread_id FROM {p}_threads WHERE thread_id >= :low AND thread_id < :high"

# A thread's own children, newest plan first; the NOT LIKE leaves out their own children.
_OWN_CHILDREN = (
    "SELECT thread_id FROM {p}_threads WHERE thread_id >= :low AND thread_id < :high"
    " AND thread_id NOT LIKE :deeper ESCAPE '!' ORDER BY thread_id DESC LIMIT :limit"
)


def _below(prefix: str) -> dict[str, str]:
    """The bounds of :data:`_CHILDREN_OF` for the ids starting with ``prefix`` (ending in the separator)."""
    return {"low": prefix, "high": f"{prefix[:-1]}{chr(ord(SEPARATOR) + 1)}"}


def _like_prefix(prefix: str) -> str:
    """A ``LIKE`` pattern (escape ``!``) matching what starts with ``prefix``."""
    escaped = prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"{escaped}%"


class ChildThreadReads(ChildThreads):
    """The SQL checkpointers' listing of a thread's children: one indexed read (``Threads``)."""

    _threads: Threads

    def _child_thread_ids(
        self, thread_id: str, plan_id: str | None = None, *, limit: int
    ) -> builtins.list[str]:
        return self._threads.child_thread_ids(thread_id, plan_id, limit)


class Threads:
    """The host API over the ``threads`` table, and deletes and prunes, for one SQL checkpointer."""

    def __init__(self, owner: SqlCheckpointer, statements: Statements) -> None:
        self._owner = owner
        self._statements = statements

    # --- reading ----------------------------------------------------------------------

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        updated_before: Any = None,
        updated_after: Any = None,
        due_before: Any = None,
    ) -> builtins.list[ThreadInfo]:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.list_threads`."""
        needle = checks.search_text(search)
        wanted = _records.check_metadata_filter(metadata)
        status = checks.thread_status(status)
        offset = checks.count(offset, "offset") or 0
        limit = checks.count(limit, "limit", optional=True)
        before = checks.moment(updated_before, "updated_before")
        after = checks.moment(updated_after, "updated_after")
        due = checks.moment(due_before, "due_before")
        # A subgraph's thread belongs to its root thread: never listed, recovered or ticked alone.
        conditions: builtins.list[str] = ["t.thread_id NOT LIKE :child_pattern"]
        params: dict[str, Any] = {"now": time.time(), "child_pattern": _CHILD_PATTERN}
        if needle:
            conditions.append(self._owner.FIND)
            params["needle"] = needle.lower()
        if status == "running":
            conditions.append("h.thread_id IS NOT NULL")
        elif status is not None:
            conditions.append("t.status = :status")
            params["status"] = status
        if before is not None:
            conditions.append("t.updated_at < :before")
            params["before"] = before
        if after is not None:
            conditions.append("t.updated_at >= :after")
            params["after"] = after
        order = "t.updated_at DESC, t.thread_id DESC"
        if due is not None:
            # The partial index on due_at: what is due, the most overdue first.
            conditions.append("t.due_at IS NOT NULL AND t.due_at <= :due")
            params["due"] = due
            order = "t.due_at, t.thread_id"
        in_python: dict[str, Any] = {}
        for index, (key, value) in enumerate(wanted.items()):
            filtered = self._owner.metadata_filter(index, key, value)
            if filtered is None:
                in_python[key] = value
                continue
            conditions.append(filtered[0])
            params.update(filtered[1])
        page = ""
        if (limit is not None or offset) and not in_python:
            page = " LIMIT :limit OFFSET :offset"
            params["limit"] = limit if limit is not None else checks.MAX_LIMIT
            params["offset"] = offset
        template = (
            f"SELECT {THREAD_COLUMNS} FROM {{p}}_threads AS t LEFT JOIN {{p}}_holds AS h "
            f"ON h.thread_id = t.thread_id AND {LIVE_HOLD} WHERE {' AND '.join(conditions)} "
            f"ORDER BY {order}{page}"
        )
        rows = self._owner.transact(
            lambda session: session.query(self._statements.built(template), **params),
            what="list threads",
            write=False,
        )
        infos = [thread_from_row(row, self._owner.sealer) for row in rows]
        if in_python:
            matching = [i for i in infos if _records.metadata_matches(i.metadata, in_python)]
            infos = matching[offset : None if limit is None else offset + limit]
        return infos

    def get_thread(self, thread_id: str, *, hold: Hold | None = None) -> ThreadInfo | None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.get_thread` (``hold``: through its connection)."""
        thread_id = checks.thread_id(thread_id)
        rows = self._owner.transact(
            lambda session: session.query(
                self._statements.named("thread"), thread_id=thread_id, now=time.time()
            ),
            what="read the thread",
            thread_id=thread_id,
            write=False,
            hold=hold,
        )
        return thread_from_row(rows[0], self._owner.sealer) if rows else None

    def put_thread_metadata(self, thread_id: str, metadata: Mapping[str, Any]) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.put_thread_metadata`."""
        thread_id = checks.thread_id(thread_id)
        text = _records.encode_thread_metadata(thread_id, metadata)
        self._owner.transact(
            lambda session: session.execute(
                self._statements.named("put_thread_metadata"),
                thread_id=thread_id,
                metadata=text,
                now=time.time(),
            ),
            what="store thread metadata",
            thread_id=thread_id,
        )

    def child_thread_ids(self, thread_id: str, plan_id: str | None, limit: int) -> builtins.list[str]:
        """See :meth:`ilmek.checkpoint.child_threads.ChildThreads._child_thread_ids`."""
        thread_id = checks.thread_id(thread_id)
        limit = checks.count(limit, "limit") or 0
        own = children_prefix(thread_id)
        low = own if plan_id is None else f"{own}{checks.checkpoint_id(plan_id, 'plan_id')}{SEPARATOR}"
        deeper = f"{_like_prefix(own)}{SEPARATOR}%{SEPARATOR}%"
        rows = self._owner.transact(
            lambda session: session.query(
                self._statements.built(_OWN_CHILDREN), **_below(low), deeper=deeper, limit=limit
            ),
            what="list the thread's subgraph threads",
            thread_id=thread_id,
            write=False,
        )
        return [row[0] for row in rows]

    # --- deleting ---------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.delete_thread`."""
        thread_id = checks.thread_id(thread_id)

        def work(session: Session) -> None:
            self._owner.advisory_lock(session, thread_id, wait=True)
            for name in THREAD_DELETIONS:
                session.execute(self._statements.named(name), thread_id=thread_id)
            self._delete_children(session, [thread_id])

        self._owner.transact(work, what="delete the thread", thread_id=thread_id)
        _LOG.info("deleted thread %r", thread_id, extra={"thread_id": thread_id})

    def delete_threads(
        self,
        *,
        updated_before: Any = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> int:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.delete_threads`."""
        before = checks.moment(updated_before, "updated_before")
        status = checks.thread_status(status)
        remaining = checks.count(limit, "limit", optional=True)
        if status == "running":
            return 0  # never a thread a live run holds
        deleted = 0
        while remaining is None or remaining > 0:
            batch = CHUNK if remaining is None else min(CHUNK, remaining)
            count = self._delete_batch(before, status, batch)
            deleted += count
            if remaining is not None:
                remaining -= count
            if count < batch:
                break
        return deleted

    def _delete_batch(self, before: float | None, status: str | None, batch: int) -> int:
        conditions = [
            f"NOT EXISTS (SELECT 1 FROM {{p}}_holds AS h WHERE h.thread_id = t.thread_id AND {LIVE_HOLD})",
            "t.thread_id NOT LIKE :child_pattern",
        ]
        params: dict[str, Any] = {"batch": batch, "now": time.time(), "child_pattern": _CHILD_PATTERN}
        if before is not None:
            conditions.append("t.updated_at < :before")
            params["before"] = before
        if status is not None:
            conditions.append("t.status = :status")
            params["status"] = status
        template = (
            f"SELECT t.thread_id FROM {{p}}_threads AS t WHERE {' AND '.join(conditions)} "
            "ORDER BY t.updated_at, t.thread_id LIMIT :batch"
        )

        def work(session: Session) -> int:
            candidates = [row[0] for row in session.query(self._statements.built(template), **params)]
            return len(self._claim_and_delete(session, candidates))

        deleted: int = self._owner.transact(work, what="delete threads")
        if deleted:
            _LOG.info("deleted %d threads", deleted)
        return deleted

    def delete_idle_thread(self, thread_id: str) -> None:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.delete_idle_thread`."""
        thread_id = checks.thread_id(thread_id)

        def work(session: Session) -> bool:
            self._owner.advisory_lock(session, thread_id, wait=True)
            if self._claim_and_delete(session, [thread_id]):
                return True
            # Not claimed: either there is no such thread, or a live run holds it.
            if session.query(self._statements.named("thread_exists"), thread_id=thread_id):
                raise busy_error(thread_id)
            return False

        if self._owner.transact(work, what="delete the thread", thread_id=thread_id):
            _LOG.info("deleted thread %r", thread_id, extra={"thread_id": thread_id})

    def _claim_and_delete(self, session: Session, candidates: Sequence[str]) -> builtins.list[str]:
        """Inside a write: delete those of ``candidates`` no live run holds; the ids deleted."""
        claimed: builtins.list[str] = []
        token = new_token()
        statements = self._statements
        for chunk in chunks(candidates):
            # Take the hold of each candidate no live run holds, all in one
            # statement: a run that took one since it was listed keeps it
            # (its row wins), and one that tries now waits for this commit.
            rows = session.query(
                statements.built(CLAIM_FOR_DELETE, len(chunk)),
                owner=token,
                ttl=self._owner.lease_seconds,
                now=time.time(),
                **statements.in_params(chunk),
            )
            claimed.extend(row[0] for row in rows)
        self._delete_rows(session, claimed)
        self._delete_children(session, claimed)
        return claimed

    def _delete_rows(self, session: Session, thread_ids: Sequence[str]) -> None:
        statements = self._statements
        for chunk in chunks(thread_ids):
            for deletion in THREADS_DELETIONS:
                session.execute(statements.built(deletion, len(chunk)), **statements.in_params(chunk))

    def _delete_children(self, session: Session, thread_ids: Sequence[str]) -> None:
        """Inside a write: delete every subgraph thread of ``thread_ids`` (they go with their root)."""
        children: builtins.list[str] = []
        for thread_id in thread_ids:
            rows = session.query(self._statements.built(_CHILDREN_OF), **_below(children_prefix(thread_id)))
            children.extend(row[0] for row in rows)
        self._delete_rows(session, children)

    # --- pruning ----------------------------------------------------------------------

    def prune(self, thread_id: str, keep_last: int) -> int:
        """See :meth:`ilmek.checkpoint.base.Checkpointer.prune`."""
        thread_id = checks.thread_id(thread_id)
        keep_last = checks.count(keep_last, "keep_last", minimum=1) or 1
        with self._owner.hold(thread_id) as hold:
            result: int = self._owner.transact(
                lambda session: self._prune(session, thread_id, keep_last),
                what="prune checkpoints",
                thread_id=thread_id,
                hold=hold,
            )
        return result

    def _prune(self, session: Session, thread_id: str, keep_last: int) -> int:
        statements = self._statements
        lineage: dict[str, str | None] = {}
        journal_chains: dict[str, tuple[str, ...]] = {}
        plans: dict[str, str] = {}
        for checkpoint_id, parent_id, chain, plan_id in session.query(
            statements.named("lineage"), thread_id=thread_id
        ):
            lineage[checkpoint_id] = parent_id
            plans[checkpoint_id] = plan_id or checkpoint_id
            journal_chains[checkpoint_id] = _records.decode_chain(
                chain, thread_id=thread_id, checkpoint_id=checkpoint_id
            )
        keep = checkpoints_to_keep(builtins.list(lineage), lineage, keep_last)
        dropped = [checkpoint_id for checkpoint_id in lineage if checkpoint_id not in keep]
        if not dropped:
            return 0
        ceiling_rows = session.query(statements.named("max_blob"), thread_id=thread_id)
        ceiling = ceiling_rows[0][0] if ceiling_rows else None
        for chunk in chunks(dropped):
            session.execute(
                statements.built(
                    "DELETE FROM {p}_checkpoints WHERE thread_id = :thread_id AND checkpoint_id IN ({in})",
                    len(chunk),
                ),
                thread_id=thread_id,
                **statements.in_params(chunk),
            )
        self._drop_unused_blobs(session, thread_id, ceiling)
        needed = set(keep)
        for checkpoint_id in keep:
            needed.update(journal_chains.get(checkpoint_id, ()))
        bases = [row[0] for row in session.query(statements.named("journal_bases"), thread_id=thread_id)]
        for base_id in bases:
            if base_id not in needed:
                session.execute(statements.named("drop_base_entries"), thread_id=thread_id, base_id=base_id)
        self._drop_pruned_children(session, thread_id, {plans[checkpoint_id] for checkpoint_id in keep})
        return len(dropped)

    def _drop_pruned_children(self, session: Session, thread_id: str, kept_plans: set[str]) -> None:
        """Inside a prune: delete the children of supersteps no kept checkpoint plans (their trees too)."""
        rows = session.query(self._statements.built(_CHILDREN_OF), **_below(children_prefix(thread_id)))
        gone = [row[0] for row in rows if not child_of_plans(thread_id, row[0], kept_plans)]
        self._delete_rows(session, gone)

    def _drop_unused_blobs(self, session: Session, thread_id: str, ceiling: Any) -> None:
        """Delete the blobs no kept checkpoint's manifest points at, up to ``ceiling`` (None: no blobs)."""
        statements = self._statements
        used: set[int] = set()
        for checkpoint_id, stored in session.query(statements.named("manifests"), thread_id=thread_id):
            plain = _records.load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id)
            used |= blob_ids([manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=checkpoint_id)])
        if ceiling is None:
            return
        # Only blobs that existed when we looked: a commit racing this
        # prune may have written newer ones that it still needs.
        existing = session.query(
            statements.built(
                "SELECT blob_id FROM {p}_blobs WHERE thread_id = :thread_id AND blob_id <= :ceiling"
            ),
            thread_id=thread_id,
            ceiling=ceiling,
        )
        unused = [row[0] for row in existing if row[0] not in used]
        for chunk in chunks(unused):
            session.execute(
                statements.built(
                    "DELETE FROM {p}_blobs WHERE thread_id = :thread_id AND blob_id IN ({in})", len(chunk)
                ),
                thread_id=thread_id,
                **statements.in_params(chunk),
            )
