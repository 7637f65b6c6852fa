"""The ``gc`` command: delete the threads last updated before an age, or with ``--keep-last N`` prune them.

Built for stores of 100,000 threads and more. The threads are read a page
at a time, oldest first (a keyset, not an ``OFFSET`` that rereads every
page before it), and with ``--keep-last N`` only those with more than ``N``
checkpoints are visited: the store says which, one query per page, instead
of a prune of every thread to learn that it had nothing to drop. Threads a
live run holds are never touched, and are counted.

What it prints scales too: a summary, never a line per thread unless
``--verbose`` asks; on a terminal a progress line on stderr, rewritten in
place (``pruned 12,345 / 100,000 threads``); with ``--json`` one document.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import attrs

from ..checkpoint.base import checkpoints_to_keep
from ..errors import ThreadBusyError
from ..redact import printable
from .arguments import Subcommands, _json_option, _past_moment, _positive
from .output import _count, _json_time, _print_json, _q, _say, _when
from .stores import LIVE_HOLD, SqlCheckpointer, _opened

# `gc` never touches a running thread, so it does not offer that status.
_GC_STATUSES = ("done", "interrupted", "unfinished", "error")
# Threads are read, deleted and pruned this many at a time.
_PAGE = 500
# A terminal's progress line is redrawn at most this often (seconds).
_REDRAW = 0.1


@attrs.frozen(kw_only=True)
class _OldThread:
    """A thread `gc` acts on: its id, status, last update (epoch seconds) and number of checkpoints."""

    id: str
    status: str
    updated_at: float
    checkpoints: int


@attrs.frozen(kw_only=True)
class _Selection:
    """The threads `gc` means, in SQL: idle since before ``before``, in ``status``, no live run holding them.

    ``more_than``: only threads with more than that many checkpoints (those a
    prune to that many can shorten). The SQL goes through the checkpointer's
    own statements and transactions (its dialect, prefix and retries).
    """

    checkpointer: SqlCheckpointer
    before: float
    status: str | None
    more_than: int | None = None

    def _where(self) -> tuple[str, dict[str, Any]]:
        conditions = [
            "t.updated_at < :before",
            f"NOT EXISTS (SELECT 1 FROM {{p}}_holds AS h WHERE h.thread_id = t.thread_id AND {LIVE_HOLD})",
        ]
        params: dict[str, Any] = {"before": self.before, "now": time.time()}
        if self.status is not None:
            conditions.append("t.status = :status")
            params["status"] = self.status
        if self.more_than is not None:
            # Whether a (more_than + 1)th checkpoint exists: a probe of the
            # primary key that stops there, however long the thread's history.
            conditions.append(
                "EXISTS (SELECT 1 FROM {p}_checkpoints AS c WHERE c.thread_id = t.thread_id "
                "ORDER BY c.checkpoint_id LIMIT 1 OFFSET :more_than)"
            )
            params["more_than"] = self.more_than
        return " AND ".join(conditions), params

    def _query(self, template: str, params: dict[str, Any], count: int = 0) -> list[tuple[Any, ...]]:
        statements = self.checkpointer.statements
        rows: list[tuple[Any, ...]] = self.checkpointer.transact(
            lambda session: session.query(statements.built(template, count), **params),
            what="list old threads",
            write=False,
        )
        return rows

    def count(self) -> int:
        """How many threads the selection holds now."""
        where, params = self._where()
        return int(self._query(f"SELECT COUNT(*) FROM {{p}}_threads AS t WHERE {where}", params)[0][0])

    def pages(self) -> Iterator[list[_OldThread]]:
        """The selected threads, oldest first, a page at a time (each page read when the last is done)."""
        where, params = self._where()
        columns = (
            "t.thread_id, t.status, t.updated_at, "
            "(SELECT COUNT(*) FROM {p}_checkpoints AS c WHERE c.thread_id = t.thread_id)"
        )
        first = f"SELECT {columns} FROM {{p}}_threads AS t WHERE {where} "
        after = (
            first
            + "AND (t.updated_at > :after_at OR (t.updated_at = :after_at AND t.thread_id > :after_id)) "
        )
        order = "ORDER BY t.updated_at, t.thread_id LIMIT :page"
        template = first + order
        params["page"] = _PAGE
        while True:
            rows = self._query(template, params)
            page = [
                _OldThread(id=row[0], status=row[1], updated_at=float(row[2]), checkpoints=int(row[3]))
                for row in rows
            ]
            if page:
                yield page
            if len(page) < _PAGE:
                return
            template = after + order
            params.update(after_at=page[-1].updated_at, after_id=page[-1].id, now=time.time())

    def lineages(self, thread_ids: Sequence[str]) -> dict[str, dict[str, str | None]]:
        """Each thread's checkpoints and their parents, for a page of threads in one query."""
        statements = self.checkpointer.statements
        found: dict[str, dict[str, str | None]] = {thread_id: {} for thread_id in thread_ids}
        template = "SELECT thread_id, checkpoint_id, parent_id FROM {p}_checkpoints WHERE thread_id IN ({in})"
        for thread_id, checkpoint_id, parent_id in self._query(
            template, statements.in_params(thread_ids), len(thread_ids)
        ):
            found[thread_id][checkpoint_id] = parent_id
        return found


class _Progress:
    """``<verb> 12,345 / 100,000 threads`` rewritten in place on stderr, if it is a terminal; else nothing."""

    def __init__(self, verb: str, total: int, *, shown: bool, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._verb = verb
        self._total = total
        self._on = shown and total > 0 and self._stream.isatty()
        self._drawn_at: float | None = None

    def update(self, done: int) -> None:
        """Say ``done`` of the total are done (drawn only if enough time passed, or at the end)."""
        if not self._on:
            return
        now = time.monotonic()
        if self._drawn_at is not None and now - self._drawn_at < _REDRAW and done < self._total:
            return
        self._drawn_at = now
        self._stream.write(f"\r{self._verb} {done:,} / {self._total:,} threads")
        self._stream.flush()

    def close(self) -> None:
        """End the line, so that what follows starts on a line of its own."""
        if self._on and self._drawn_at is not None:
            self._stream.write("\n")
            self._stream.flush()


def _held(checkpointer: SqlCheckpointer, args: argparse.Namespace) -> int:
    """How many of the threads `gc` means a live run holds now (it spares them)."""
    held = checkpointer.list_threads(status="running", updated_before=args.older_than)
    return sum(1 for info in held if args.status in (None, info.status))


def _listed(thread: _OldThread, dropped: int | None = None) -> dict[str, Any]:
    """A thread in ``--json --verbose``'s ``listed``."""
    return {
        "thread": thread.id,
        "status": thread.status,
        "updated_at": _json_time(_dt.datetime.fromtimestamp(thread.updated_at, _dt.UTC)),
        "checkpoints": thread.checkpoints,
        "dropped": dropped,
        "kept": None if dropped is None else thread.checkpoints - dropped,
    }


@attrs.define
class _Report:
    """What one `gc` did (or would do), printed as a summary or as ``--json``'s document."""

    threads: int = 0
    old_threads: int = 0
    checkpoints_dropped: int | None = None
    skipped: list[str] = attrs.Factory(list)
    listed: list[dict[str, Any]] | None = None


def _delete(checkpointer: SqlCheckpointer, args: argparse.Namespace, report: _Report) -> None:
    """`gc` without ``--keep-last``: delete the old threads a page at a time (or, dry, count them)."""
    selection = _Selection(checkpointer=checkpointer, before=args.older_than, status=args.status)
    report.old_threads = selection.count()
    if args.dry_run:
        report.threads = report.old_threads
        if args.verbose:
            for page in selection.pages():
                for thread in page:
                    _list(args, report, thread, None)
        return
    progress = _Progress("deleted", report.old_threads, shown=not args.verbose)
    while True:
        deleted = checkpointer.delete_threads(updated_before=args.older_than, status=args.status, limit=_PAGE)
        report.threads += deleted
        progress.update(report.threads)
        if deleted < _PAGE:
            break
    progress.close()


def _prune(checkpointer: SqlCheckpointer, args: argparse.Namespace, report: _Report) -> None:
    """`gc --keep-last N`: prune the old threads with more than N checkpoints (or, dry, count what goes)."""
    report.old_threads = _Selection(
        checkpointer=checkpointer, before=args.older_than, status=args.status
    ).count()
    selection = _Selection(
        checkpointer=checkpointer, before=args.older_than, status=args.status, more_than=args.keep_last
    )
    progress = _Progress("checked" if args.dry_run else "pruned", selection.count(), shown=not args.verbose)
    report.checkpoints_dropped = done = 0
    for page in selection.pages():
        lineages = selection.lineages([thread.id for thread in page]) if args.dry_run else {}
        for thread in page:
            done += 1
            if args.dry_run:
                lineage = lineages[thread.id]
                dropped = len(lineage) - len(checkpoints_to_keep(list(lineage), lineage, args.keep_last))
            else:
                try:
                    dropped = checkpointer.prune(thread.id, keep_last=args.keep_last)
                except ThreadBusyError:
                    # A run took the thread since the page was read: it is that run's.
                    report.skipped.append(thread.id)
                    if args.verbose:
                        _say(f"thread {_q(thread.id)}: skipped, a run holds it now")
                    continue
            if dropped:
                report.threads += 1
                report.checkpoints_dropped += dropped
                _list(args, report, thread, dropped)
            progress.update(done)
    progress.close()


def _list(args: argparse.Namespace, report: _Report, thread: _OldThread, dropped: int | None) -> None:
    """With ``--verbose``, one thread: a line of text, or an entry of ``listed``."""
    if not args.verbose:
        return
    if args.json:
        if report.listed is None:
            report.listed = []
        report.listed.append(_listed(thread, dropped))
    elif dropped is None:
        moment = _dt.datetime.fromtimestamp(thread.updated_at, _dt.UTC)
        _say(printable(f"{_when(moment)}  {thread.status:<11}  {thread.id}"))
    else:
        verb = "would drop" if args.dry_run else "dropped"
        kept = thread.checkpoints - dropped
        _say(f"thread {_q(thread.id)}: {verb} {_count(dropped, 'checkpoint')}, {kept:,} kept")


def _summary(args: argparse.Namespace, report: _Report, running: int) -> None:
    """The lines `gc` ends with: what it did, what it left to runs."""
    what = f"last updated before {_when(_dt.datetime.fromtimestamp(args.older_than, _dt.UTC))}"
    what += f", status {args.status}" if args.status else ""
    if args.keep_last is None:
        _say(f"{'would delete' if args.dry_run else 'deleted'} {_count(report.threads, 'thread')} {what}")
    else:
        verb = "would drop" if args.dry_run else "dropped"
        dropped = _count(report.checkpoints_dropped or 0, "checkpoint")
        _say(f"{verb} {dropped} of {_count(report.threads, 'thread')} ({report.old_threads:,} {what})")
    if report.skipped:
        _say(f"skipped {_count(len(report.skipped), 'thread')} that a run took meanwhile")
    if running:
        _say(f"kept {_count(running, 'thread')} that a run holds now")


def _cmd_gc(args: argparse.Namespace) -> int:
    report = _Report(listed=[] if args.verbose and args.json else None)
    # A delete or prune is a transaction per page or thread, and with SQLite's
    # FULL each commit waits for the disk: NORMAL (still safe from a killed
    # process, and WAL keeps commits in order) only risks that a power cut
    # undoes the last deletes, which the next gc does again. Nothing that
    # was meant to be kept can be lost that way.
    with _opened(args, synchronous="NORMAL") as checkpointer:
        running = _held(checkpointer, args)
        if args.keep_last is None:
            _delete(checkpointer, args, report)
        else:
            _prune(checkpointer, args, report)
    if not args.json:
        _summary(args, report, running)
        return 0
    _print_json(
        {
            "action": "delete" if args.keep_last is None else "prune",
            "dry_run": args.dry_run,
            "older_than": _json_time(_dt.datetime.fromtimestamp(args.older_than, _dt.UTC)),
            "status": args.status,
            "keep_last": args.keep_last,
            "threads": report.threads,
            "old_threads": report.old_threads,
            "checkpoints_dropped": report.checkpoints_dropped,
            "running": running,
            "skipped": report.skipped,
            "listed": report.listed,
        }
    )
    return 0


def add_gc_parser(commands: Subcommands) -> None:
    """Add ``gc``, which deletes or prunes old threads, to the commands."""
    gc = commands.add(
        "gc",
        _cmd_gc,
        "Delete threads last updated before an age (never one a run holds), or with --keep-last "
        "prune each of them instead. Prints a summary (on a terminal, a progress line on stderr as "
        "it goes).",
    )
    gc.add_argument(
        "--older-than",
        type=_past_moment,
        required=True,
        metavar="AGE",
        help="threads last updated before then: 30d, 12h, or an ISO date (2024-05-01)",
    )
    gc.add_argument("--status", choices=_GC_STATUSES, help="only threads in this status")
    gc.add_argument(
        "--keep-last",
        type=_positive,
        metavar="N",
        help="keep the threads; drop all but the N newest checkpoints of each (and every one a "
        "branch or pause needs); only threads with more than N are visited",
    )
    gc.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
    gc.add_argument(
        "--verbose",
        action="store_true",
        help="also a line per thread pruned (with --dry-run: per thread that would be deleted or "
        "pruned), instead of the progress line; a plain delete lists none",
    )
    _json_option(
        gc,
        '{"action" (delete or prune), "dry_run", "older_than", "status", "keep_last", "threads" (deleted, '
        'or pruned: a checkpoint dropped), "old_threads" (idle that long, no run holding them), '
        '"checkpoints_dropped" (null for a delete), "running" (spared), "skipped" (ids a run took '
        'meanwhile), "listed" (with --verbose, each thread: "thread", "status", "updated_at", '
        '"checkpoints", "dropped", "kept"; else null)}',
    )
