"""The ``ilmek`` command line (``python -m ilmek``): inspect and manage a checkpoint store.

Commands: ``demo`` (the checkout flow, paused in one process and answered in
another), ``threads``, ``history`` (the checkpoint tree), ``show``,
``delete``, ``prune``, ``migrate`` and ``ddl``; for operations ``recover``
(continue stalled threads with graphs named ``MODULE:NAME``), ``cancel`` (ask
a running thread to stop) and ``gc`` (delete or prune old threads). A store
is a SQLite file path, a ``postgresql://`` URL or a libpq keyword string
(``host=... dbname=...``), given with ``--db`` or ``ILMEK_DB``; without one
it is the default SQLite file. Only the standard library (``argparse``) and the public checkpointer API
are used; how values and trees are drawn for a terminal belongs here too.

Everything printed that came from a store or from the command line goes
through :func:`ilmek.redact.printable` (and, on stderr, through
:func:`ilmek.redact.mask_secrets`), so stored text cannot drive the terminal
and no password is shown. Bad input ends in one ``ilmek: ...`` line on stderr
and exit status 2 (usage) or 1 (failure), never in a traceback.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import io
import os
import pathlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from .. import __version__
from ..checkpoint.base import Checkpointer, checkpoints_to_keep
from ..errors import IlmekError, ThreadBusyError
from ..graph import CompiledGraph
from ..loading import load_graphs
from ..operations import recover, request_cancel, stalled_threads
from ..redact import printable
from ..types import Result, ThreadInfo
from .arguments import (
    _THREAD_HELP,
    Subcommands,
    _database_argument,
    _Parser,
    _past_moment,
    _positive,
    _store_options,
    _text,
)
from .demo import DEFAULT_THREAD as DEFAULT_THREAD
from .demo import DEMO_COMMAND_ENV as DEMO_COMMAND_ENV
from .demo import add_demo_parser
from .failures import _CommandFailed, _UsageError
from .history import add_history_parser, render_history
from .output import (
    _NOTE_TEXT,
    _align,
    _clip,
    _complain,
    _one_line,
    _q,
    _say,
    _shell_word,
    _shorten,
    _when,
)
from .rendering import render_value
from .stores import (
    _URL,
    SqlCheckpointer,
    _database,
    _is_postgres,
    _opened,
    _secrets_in,
    _shown_database,
    _unsupported,
    open_checkpointer,
)
from .stores import DATABASE_ENV as DATABASE_ENV
from .threads import add_show_parser, add_threads_parser

__all__ = ["build_parser", "main", "open_checkpointer", "render_history", "render_value"]


# `gc` never touches a running thread, so it does not offer that status.
_GC_STATUSES = ("done", "interrupted", "unfinished", "error")
_DIALECTS = ("postgres", "sqlite")


# --- what may be printed ------------------------------------------------------------------


# --- opening a store ----------------------------------------------------------------------


# --- demo -------------------------------------------------------------------------------


# --- JSON output --------------------------------------------------------------------------


# --- threads ----------------------------------------------------------------------------


# --- history ----------------------------------------------------------------------------


# --- show -------------------------------------------------------------------------------


# --- web ----------------------------------------------------------------------------------


def _cmd_web(args: argparse.Namespace) -> int:
    """Serve the web console until Ctrl-C (``ilmek web``)."""
    # Imported here: the other commands never load the console or the user's graphs.
    from ..loading import load_graphs
    from ..web.serve import serve

    if not 0 <= args.port <= 65535:
        raise _CommandFailed(f"--port must be between 0 and 65535, got {args.port}")
    graphs = load_graphs(args.graph)
    with _opened(args) as checkpointer:
        try:
            return serve(
                checkpointer, graphs, host=args.host, port=args.port, allow_actions=args.allow_actions
            )
        except OSError as error:
            raise _CommandFailed(
                f"cannot listen on {_q(args.host)} port {args.port}: {error.strerror or error}"
            ) from error


# --- delete, prune ------------------------------------------------------------------------


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _exists(checkpointer: SqlCheckpointer, thread_id: str) -> bool:
    return checkpointer.get_thread(thread_id) is not None or checkpointer.get(thread_id) is not None


def _confirmed(question: str) -> bool:
    try:
        answer = input(f"{printable(question)} [y/N] ")
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
            if not _confirmed(f"delete thread {_q(args.thread)} and its {_count(count, 'checkpoint')}?"):
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
                    "delete the thread under it (the run then fails at its next write)"
                ) from None
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
    _say(printable(f"dropped {_count(dropped, 'checkpoint')} of thread {_q(args.thread)}; {kept} kept"))
    return 0


# --- operations: recover, cancel, gc ------------------------------------------------------

# Threads are listed from the store this many at a time.
_PAGE = 500


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


def _before(moment: float) -> str:
    """``last updated before <moment>`` (epoch seconds), as `gc` reports what it took."""
    return f"last updated before {_when(_dt.datetime.fromtimestamp(moment, _dt.UTC))}"


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


def _cmd_recover(args: argparse.Namespace) -> int:
    graphs = _loaded_graphs(args.graphs)
    older_than = max(0.0, time.time() - args.older_than) if args.older_than is not None else 0.0
    with _opened(args) as checkpointer:
        stalled = stalled_threads(checkpointer, older_than=older_than, limit=args.limit)
        owners = {info.id: _graph_name(checkpointer, info.id) for info in stalled}
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
        results = recover(graphs, checkpointer, older_than=older_than, limit=args.limit)
    continued = {result.thread_id for result in results}
    for result in results:
        _say(printable(f"thread {_q(result.thread_id)}: {_outcome(result)}"))
    for info in stalled:
        if info.id in continued:
            continue
        owner = owners[info.id]
        if _runs_with(owner, graphs):
            why = "another process or run took it first"
        else:
            why = f"its graph {_q(owner or '(unnamed)')} was not given"
        _say(printable(f"thread {_q(info.id)}: not continued here ({why})"))
    if not stalled and not results:
        _say("no stalled threads")
    else:
        _say(f"continued {_count(len(results), 'thread')}")
    return 0


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
    _say(
        printable(
            f"asked the run holding thread {_q(args.thread)} to stop: it ends aborted "
            f"({_shorten(args.reason)}) at its next superstep"
        )
    )
    return 0


def _old_threads(checkpointer: Checkpointer, args: argparse.Namespace) -> tuple[list[ThreadInfo], int]:
    """The threads `gc` would touch, least recently updated first, and how many running ones it spares."""
    found: list[ThreadInfo] = []
    offset = 0
    while True:
        page = checkpointer.list_threads(
            status=args.status, updated_before=args.older_than, offset=offset, limit=_PAGE
        )
        found.extend(page)
        if len(page) < _PAGE:
            break
        offset += _PAGE
    idle = [info for info in found if not info.running]
    idle.reverse()
    return idle, len(found) - len(idle)


def _cmd_gc(args: argparse.Namespace) -> int:
    what = _before(args.older_than) + (f", status {args.status}" if args.status else "")
    with _opened(args) as checkpointer:
        if args.keep_last is None and not args.dry_run:
            spared = [
                info
                for info in checkpointer.list_threads(status="running", updated_before=args.older_than)
                if args.status in (None, info.status)
            ]
            deleted = checkpointer.delete_threads(updated_before=args.older_than, status=args.status)
            _say(f"deleted {_count(deleted, 'thread')} {what}")
            if spared:
                _say(f"kept {_count(len(spared), 'thread')} that a run holds now")
            return 0
        threads, running = _old_threads(checkpointer, args)
        if args.keep_last is None:
            for info in threads:
                _say(printable(f"{_when(info.updated_at)}  {info.status:<11}  {info.id}"))
            _say(f"would delete {_count(len(threads), 'thread')} {what}")
        else:
            _gc_prune(checkpointer, threads, args, what)
        if running:
            _say(f"kept {_count(running, 'thread')} that a run holds now")
    return 0


def _gc_prune(
    checkpointer: Checkpointer, threads: Sequence[ThreadInfo], args: argparse.Namespace, what: str
) -> None:
    """`gc --keep-last N`: prune each thread instead of deleting it (``what``: which threads, in words)."""
    verb = "would drop" if args.dry_run else "dropped"
    dropped_total = touched = 0
    for info in threads:
        if args.dry_run:
            lineage = {c.id: c.parent_id for c in checkpointer.list(info.id)}
            keep = checkpoints_to_keep(list(lineage), lineage, args.keep_last)
            dropped, kept = len(lineage) - len(keep), len(keep)
        else:
            try:
                dropped = checkpointer.prune(info.id, keep_last=args.keep_last)
            except ThreadBusyError:
                # A run took the thread since it was listed: leave it to that run.
                _say(printable(f"thread {_q(info.id)}: skipped, a run holds it now"))
                continue
            kept = len(checkpointer.list(info.id))
        if dropped:
            touched += 1
            dropped_total += dropped
            _say(printable(f"thread {_q(info.id)}: {verb} {_count(dropped, 'checkpoint')}, {kept} kept"))
    _say(
        f"{verb} {_count(dropped_total, 'checkpoint')} of {_count(touched, 'thread')} ({len(threads)} {what})"
    )


# --- schema -------------------------------------------------------------------------------


def _cmd_migrate(args: argparse.Namespace) -> int:
    if args.database is not None:
        args.db = args.database
    with _opened(args, create=True) as checkpointer:
        checkpointer.migrate()
        _say(f"{checkpointer.table_prefix}_* tables up to date, schema version {checkpointer.schema_version}")
    return 0


def _ddl_statements(dialect: str, table_prefix: str) -> list[str]:
    """What ``SqlCheckpointer.ddl()`` returns for ``dialect``, built without a connection."""
    checkpointer_class: type[SqlCheckpointer]
    if dialect == "postgres":
        from ..checkpoint.postgres import PostgresCheckpointer

        checkpointer_class = PostgresCheckpointer
    else:
        from ..checkpoint.sqlite import SqliteCheckpointer

        checkpointer_class = SqliteCheckpointer
    return checkpointer_class.schema_sql(table_prefix)


def _cmd_ddl(args: argparse.Namespace) -> int:
    dialect = args.dialect
    if dialect is None:
        # The store's form says its dialect; nothing is opened or created.
        database = _database(args)
        if _is_postgres(database):
            dialect = "postgres"
        elif _URL.match(database.lstrip()):
            raise _CommandFailed(_unsupported(database))
        else:
            dialect = "sqlite"
    for statement in _ddl_statements(dialect, args.table_prefix):
        _say(f"{statement};")
    return 0


# --- the parser ---------------------------------------------------------------------------


def _program_name() -> str:
    # Installed as the `ilmek` script, argv[0] says so; under `python -m ilmek` it is __main__.py.
    name = pathlib.Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
    return "ilmek" if name == "ilmek" else "python -m ilmek"


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every command (``prog`` names the program in help and hints)."""
    prog = prog or _program_name()
    parser = _Parser(
        prog=prog,
        description="Inspect and manage ilmek checkpoint stores, or run the checkout demo.",
    )
    parser.add_argument("--version", action="version", version=f"ilmek {__version__}")
    _store_options(parser, default=None)
    parser.set_defaults(prog=prog)
    # The store options may also follow the command; there they default to
    # "not given", so they never undo what came before the command.
    store = _Parser(add_help=False)
    _store_options(store, default=argparse.SUPPRESS)
    commands = Subcommands(
        subparsers=parser.add_subparsers(title="commands", metavar="COMMAND", required=True), store=store
    )

    add_demo_parser(commands)

    add_threads_parser(commands)

    add_history_parser(commands)

    add_show_parser(commands)

    delete = commands.add("delete", _cmd_delete, "Delete a thread: its checkpoints, journals and metadata.")
    delete.add_argument("thread", type=_text, metavar="THREAD", help=_THREAD_HELP)
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument(
        "--force",
        action="store_true",
        help="delete it even while a run holds it (that run then fails at its next write)",
    )

    prune = commands.add(
        "prune",
        _cmd_prune,
        "Drop a thread's old checkpoints, keeping the newest N and every one a branch or pause needs.",
    )
    prune.add_argument("thread", type=_text, metavar="THREAD", help=_THREAD_HELP)
    prune.add_argument("--keep-last", type=_positive, required=True, metavar="N", help="keep the N newest")

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

    gc = commands.add(
        "gc",
        _cmd_gc,
        "Delete threads last updated before an age (never one a run holds), or with --keep-last "
        "prune each of them instead.",
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
        "branch or pause needs)",
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would go; change nothing")

    migrate = commands.add("migrate", _cmd_migrate, "Create or upgrade the store's tables.")
    migrate.add_argument(
        "database",
        type=_database_argument,
        nargs="?",
        metavar="DATABASE",
        help="the store, as with --db (which it overrides)",
    )

    web = commands.add(
        "web",
        _cmd_web,
        "Serve the web console: the threads waiting for an answer, each thread's checkpoint tree, "
        "state, journals and graph; with --allow-actions, answer, fork, cancel, recover and delete.",
    )
    web.add_argument(
        "--graph",
        action="append",
        default=[],
        type=_text,
        metavar="MODULE:GRAPH",
        help="a graph to draw and to answer its threads with (repeatable), e.g. myapp.flows:checkout",
    )
    web.add_argument(
        "--host", type=_text, default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    web.add_argument("--port", type=int, default=8765, help="the port (default: 8765; 0 picks a free one)")
    web.add_argument(
        "--allow-actions",
        action="store_true",
        help="show the forms that answer, cancel, recover and delete (no login: keep it on 127.0.0.1)",
    )

    ddl = commands.add(
        "ddl",
        _cmd_ddl,
        "Print the SQL that creates the store's tables, for running it yourself; connects to nothing.",
    )
    ddl.add_argument(
        "--dialect",
        choices=_DIALECTS,
        help="the database's dialect (default: the kind of store --db names)",
    )
    return parser


def _tolerant_streams() -> None:
    # A terminal or pipe that cannot encode a character gets an escape, not a
    # UnicodeEncodeError halfway through the output.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit status.

    0 on success, 1 when the command fails, 2 for a usage error; either
    failure prints one line, ``ilmek: <message>``, to stderr (never a
    traceback, never a password, never a raw control character).
    """
    _tolerant_streams()
    arguments = list(sys.argv[1:] if argv is None else argv)
    secrets = _secrets_in(arguments)
    parser = build_parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exit_:
        # argparse exits for --help and --version; callers get the status instead.
        return 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 2
    except _UsageError as error:
        _complain(str(error), secrets)
        return 2
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (IlmekError, _CommandFailed) as error:
        _complain(str(error), secrets)
        return 1
    except KeyboardInterrupt:
        print("ilmek: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`ilmek history t | head`): stop quietly, as Unix
        # tools do, and keep Python from complaining again when it flushes stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (OSError, ValueError) as error:
        # Bad input a store or driver refused (an unreadable file, text it
        # cannot encode): the message, not a traceback.
        _complain(f"{type(error).__name__}: {error}", secrets)
        return 1
