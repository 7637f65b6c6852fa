"""The commands that change threads: ``delete``, ``prune``; for operations ``recover``, ``cancel``.

``recover`` continues stalled threads with the graphs given as
``MODULE:NAME``; ``cancel`` asks the run holding a thread to stop (``gc``,
which deletes or prunes old threads in bulk, is :mod:`ilmek.cli.gc`). None
of them touches a thread a live run holds unless asked to (``delete --force``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..checkpoint.base import Checkpointer
from ..errors import IlmekError, ThreadBusyError
from ..graph import CompiledGraph
from ..loading import load_graphs
from ..operations import recover, request_cancel, stalled_threads
from ..redact import printable
from ..types import Result, ThreadInfo
from .arguments import _THREAD_HELP, Subcommands, _json_option, _past_moment, _positive, _text
from .failures import _CommandFailed
from .output import (
    _NOTE_TEXT,
    _align,
    _clip,
    _count,
    _json_time,
    _one_line,
    _pending_json,
    _print_json,
    _q,
    _say,
    _shell_word,
    _shorten,
    _when,
)
from .stores import SqlCheckpointer, _database, _opened, _shown_database

# --- delete, prune ------------------------------------------------------------------------


def _exists(checkpointer: SqlCheckpointer, thread_id: str) -> bool:
    return checkpointer.get_thread(thread_id) is not None or checkpointer.get(thread_id) is not None


def _confirmed(question: str, *, on_stderr: bool = False) -> bool:
    """Ask on the terminal; only yes is yes. ``on_stderr``: stdout is for a JSON document."""
    prompt = f"{printable(question)} [y/N] "
    try:
        if not on_stderr:
            answer = input(prompt)
        else:
            sys.stderr.write(prompt)
            sys.stderr.flush()
            answer = sys.stdin.readline()
            if not answer:
                return False
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes"}


def _cmd_delete(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        if not _exists(checkpointer, args.thread):
            raise _CommandFailed(
                f"thread {_q(args.thread)} does not exist in {_shown_database(_database(args))}"
            )
        if not args.yes:
            if not sys.stdin.isatty():
                raise _CommandFailed(
                    f"not deleting thread {_q(args.thread)} without confirmation: stdin is not a "
                    "terminal, so pass --yes"
                )
            count = len(checkpointer.list(args.thread))
            question = f"delete thread {_q(args.thread)} and its {_count(count, 'checkpoint')}?"
            if not _confirmed(question, on_stderr=args.json):
                raise _CommandFailed("nothing deleted")
        if args.force:
            checkpointer.delete_thread(args.thread)
        else:
            try:
                checkpointer.delete_idle_thread(args.thread)
            except ThreadBusyError:
                raise _CommandFailed(
                    f"a run holds thread {_q(args.thread)} now: nothing deleted. Stop the run "
                    f"first with: ilmek cancel {_shell_word(args.thread)}; or pass --force to "
                    "delete the thread under it (the run then fails at its next step or write)"
                ) from None
    if args.json:
        _print_json({"thread": args.thread, "deleted": True, "forced": args.force})
    else:
        _say(printable(f"deleted thread {_q(args.thread)}"))
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        if not _exists(checkpointer, args.thread):
            raise _CommandFailed(
                f"thread {_q(args.thread)} does not exist in {_shown_database(_database(args))}"
            )
        dropped = checkpointer.prune(args.thread, keep_last=args.keep_last)
        kept = len(checkpointer.list(args.thread))
    if args.json:
        _print_json({"thread": args.thread, "dropped": dropped, "kept": kept})
    else:
        _say(printable(f"dropped {_count(dropped, 'checkpoint')} of thread {_q(args.thread)}; {kept} kept"))
    return 0


def add_delete_parser(commands: Subcommands) -> None:
    """Add ``delete``, which deletes a thread, to the commands."""
    delete = commands.add("delete", _cmd_delete, "Delete a thread: its checkpoints, journals and metadata.")
    delete.add_argument("thread", type=_text, metavar="THREAD", help=_THREAD_HELP)
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument(
        "--force",
        action="store_true",
        help="delete it even while a run holds it (that run then fails at its next step or write)",
    )
    _json_option(delete, '{"thread", "deleted": true, "forced"} (a question asked goes to stderr)')


def add_prune_parser(commands: Subcommands) -> None:
    """Add ``prune``, which drops a thread's old checkpoints, to the commands."""
    prune = commands.add(
        "prune",
        _cmd_prune,
        "Drop a thread's old checkpoints, keeping the newest N and every one a branch or pause needs.",
    )
    prune.add_argument("thread", type=_text, metavar="THREAD", help=_THREAD_HELP)
    prune.add_argument("--keep-last", type=_positive, required=True, metavar="N", help="keep the N newest")
    _json_option(prune, '{"thread", "dropped", "kept"} (numbers of checkpoints)')


# --- operations: recover, cancel ----------------------------------------------------------


def _loaded_graphs(references: Sequence[str]) -> dict[str, CompiledGraph]:
    """The graphs ``MODULE:NAME`` references name, keyed by graph name; any failure is one message."""
    try:
        return load_graphs(list(references))
    except IlmekError:
        raise
    except Exception as error:
        # The user's module failed to import (a syntax error, a missing
        # setting...): its message, not a traceback through ilmek.
        named = ", ".join(_q(reference) for reference in references)
        raise _CommandFailed(
            f"cannot load {named}: {type(error).__name__}: {_one_line(str(error))}"
        ) from error


def _graph_name(checkpointer: Checkpointer, thread_id: str) -> str | None:
    """The name of the graph that wrote the thread's latest checkpoint (its channels are not read)."""
    latest = checkpointer.list(thread_id, limit=1)
    name = latest[0].metadata.get("graph") if latest else None
    return name if isinstance(name, str) else None


def _runs_with(name: str | None, graphs: Mapping[str, CompiledGraph]) -> bool:
    """Whether :func:`ilmek.recover` continues a thread of graph ``name`` with ``graphs``."""
    # As recover() does: a checkpoint that names no graph goes to the only graph given.
    return name in graphs if name is not None else len(graphs) == 1


def _outcome(result: Result) -> str:
    """How a continued run ended, for one line of `recover`."""
    if result.status == "error" and result.errors:
        node, error = result.errors[0]
        return f"error (node {_q(node)}: {_clip(_one_line(f'{type(error).__name__}: {error}'), _NOTE_TEXT)})"
    if result.status == "aborted":
        return f"aborted ({_clip(result.abort_reason or 'no reason given', _NOTE_TEXT)})"
    if result.status == "interrupted":
        return "interrupted (waiting for " + ", ".join(_q(pause.id) for pause in result.pending) + ")"
    return result.status


def _result_json(result: Result) -> dict[str, Any]:
    """A continued run in `recover --json`'s ``results``."""
    error = None
    if result.status == "error" and result.errors:
        node, raised = result.errors[0]
        error = {"node": node, "type": type(raised).__name__, "message": str(raised)}
    return {
        "thread": result.thread_id,
        "status": result.status,
        "checkpoint_id": result.checkpoint_id,
        "error": error,
        "abort_reason": result.abort_reason,
        "pending": [_pending_json(pause) for pause in result.pending],
    }


def _not_continued(owner: str | None, graphs: Mapping[str, CompiledGraph]) -> str:
    """Why a stalled thread was not continued by this `recover`."""
    if _runs_with(owner, graphs):
        return "another process or run took it first"
    return f"its graph {_q(owner or '(unnamed)')} was not given"


def _recover_json(
    args: argparse.Namespace,
    stalled: Sequence[ThreadInfo],
    owners: Mapping[str, str | None],
    graphs: Mapping[str, CompiledGraph],
    results: Sequence[Result],
) -> None:
    """`recover --json`'s document: what was stalled, how each continued run ended, what was left."""
    continued = {result.thread_id for result in results}
    _print_json(
        {
            "dry_run": args.dry_run,
            "stalled": [
                {
                    "thread": info.id,
                    "status": info.status,
                    "updated_at": _json_time(info.updated_at),
                    "graph": owners[info.id],
                    "continue": _runs_with(owners[info.id], graphs),
                }
                for info in stalled
            ],
            "results": [_result_json(result) for result in results],
            "skipped": [
                {"thread": info.id, "reason": _not_continued(owners[info.id], graphs)}
                for info in stalled
                if not args.dry_run and info.id not in continued
            ],
            "continued": len(results),
        }
    )


def _cmd_recover(args: argparse.Namespace) -> int:
    graphs = _loaded_graphs(args.graphs)
    older_than = max(0.0, time.time() - args.older_than) if args.older_than is not None else 0.0
    results: list[Result] = []
    with _opened(args) as checkpointer:
        stalled = stalled_threads(checkpointer, older_than=older_than, limit=args.limit)
        owners = {info.id: _graph_name(checkpointer, info.id) for info in stalled}
        if not args.dry_run:
            # What the graphs' nodes print is theirs, not the command's: under
            # --json stdout carries the document alone, so it goes to stderr.
            with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
                results = recover(graphs, checkpointer, older_than=older_than, limit=args.limit)
    if args.json:
        _recover_json(args, stalled, owners, graphs, results)
        return 0
    if args.dry_run:
        if not stalled:
            _say("no stalled threads")
            return 0
        rows = [["THREAD", "STATUS", "UPDATED", "GRAPH", "WOULD"]]
        for info in stalled:
            owner = owners[info.id]
            would = "continue" if _runs_with(owner, graphs) else "skip: its graph was not given"
            rows.append([info.id, info.status, _when(info.updated_at), owner or "-", would])
        for line in _align(rows):
            _say(line)
        return 0
    continued = {result.thread_id for result in results}
    for result in results:
        _say(printable(f"thread {_q(result.thread_id)}: {_outcome(result)}"))
    for info in stalled:
        if info.id not in continued:
            why = _not_continued(owners[info.id], graphs)
            _say(printable(f"thread {_q(info.id)}: not continued here ({why})"))
    if not stalled and not results:
        _say("no stalled threads")
    else:
        _say(f"continued {_count(len(results), 'thread')}")
    return 0


def add_recover_parser(commands: Subcommands) -> None:
    """Add ``recover``, which continues stalled threads, to the commands."""
    recover_ = commands.add(
        "recover",
        _cmd_recover,
        "Continue stalled threads (planned tasks, no open pause, no live run: a crash or a failed "
        "node) with their graphs, replaying what their steps recorded; safe from several processes.",
    )
    recover_.add_argument(
        "graphs",
        nargs="+",
        metavar="MODULE:GRAPH",
        help="the graphs to continue threads with (module.path:name, imported from the current folder "
        "or the installed packages); a thread runs with the graph its latest checkpoint names",
    )
    recover_.add_argument(
        "--older-than",
        type=_past_moment,
        metavar="AGE",
        help="only threads idle at least that long (10m, 2h, or an ISO date; default: any); "
        "make it longer than your slowest node",
    )
    recover_.add_argument("--limit", type=_positive, metavar="N", help="at most N threads, oldest first")
    recover_.add_argument(
        "--dry-run", action="store_true", help="list the stalled threads and their graphs; run nothing"
    )
    _json_option(
        recover_,
        '{"dry_run", "stalled": [{"thread", "status", "updated_at", "graph", "continue"}, ...], '
        '"results": [{"thread", "status", "checkpoint_id", "error": null or {"node", "type", "message"}, '
        '"abort_reason", "pending"}, ...], "skipped": [{"thread", "reason"}, ...], "continued"}',
    )


def _cmd_cancel(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        asked = request_cancel(checkpointer, args.thread, args.reason)
        exists = asked or _exists(checkpointer, args.thread)
    if not asked:
        if not exists:
            raise _CommandFailed(
                f"thread {_q(args.thread)} does not exist in {_shown_database(_database(args))}"
            )
        raise _CommandFailed(f"no run holds thread {_q(args.thread)} now: nothing to cancel")
    if args.json:
        _print_json({"thread": args.thread, "asked": True, "reason": args.reason})
        return 0
    _say(
        printable(
            f"asked the run holding thread {_q(args.thread)} to stop: it ends aborted "
            f"({_shorten(args.reason)}) at its next superstep"
        )
    )
    return 0


def add_cancel_parser(commands: Subcommands) -> None:
    """Add ``cancel``, which stops the run holding a thread, to the commands."""
    cancel = commands.add(
        "cancel",
        _cmd_cancel,
        "Ask the run that holds a thread now, in any process, to stop: it ends aborted at its next "
        "superstep (exit status 1 if no run holds the thread).",
    )
    cancel.add_argument("thread", type=_text, metavar="THREAD", help=_THREAD_HELP)
    cancel.add_argument(
        "--reason", type=_text, default="cancelled", metavar="TEXT", help="why (default: cancelled)"
    )
    _json_option(cancel, '{"thread", "asked": true, "reason"}')
