"""The ``ilmek`` command line (``python -m ilmek``): inspect and manage a checkpoint store.

Commands: ``demo`` (the checkout flow, paused in one process and answered in
another), ``threads``, ``history`` (the checkpoint tree), ``show``,
``delete``, ``prune``, ``migrate`` and ``ddl``. A store is a SQLite file path
or a ``postgresql://`` URL, given with ``--db`` or ``ILMEK_DB``; without one
it is the default SQLite file. Only the standard library (``argparse``) and
the public checkpointer API are used; how values and trees are drawn for a
terminal belongs here too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import decimal
import json
import os
import pathlib
import re
import shlex
import sys
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from .checkpoint._sql import SqlCheckpointer, validate_prefix
from .checkpoint.sqlite import DEFAULT_PATH, SqliteCheckpointer
from .demo import CART, build_checkout_graph, question_of
from .engine import resume, run
from .errors import IlmekError
from .types import Checkpoint, Pending, Result

__all__ = ["build_parser", "main", "open_checkpointer", "render_history", "render_value"]

DATABASE_ENV: Final = "ILMEK_DB"
"""The environment variable that names the store when ``--db`` is not given."""

DEFAULT_THREAD: Final = "demo"

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_THREAD_STATUSES = ("done", "interrupted", "unfinished")

# How much of a value `show` prints unless --full is given.
_MAX_TEXT = 200
_HEAD_ITEMS = 10
_TAIL_ITEMS = 3
_MAX_KEYS = 30
_MAX_DEPTH = 6
_LINE_WIDTH = 100
# `show` prints "label  value" lines with the values in one column.
_LABEL_WIDTH = 13


class _CommandFailed(Exception):
    """A command cannot do what it was asked; its message is printed as ``ilmek: ...``."""


# --- opening a store --------------------------------------------------------------------


def _is_postgres_url(database: str) -> bool:
    return database.startswith(_POSTGRES_SCHEMES)


def open_checkpointer(database: str | os.PathLike[str], table_prefix: str = "ilmek") -> SqlCheckpointer:
    """Open the checkpointer a command line names: a SQLite path or a Postgres URL.

    Args:
        database: A file path (created, with its folders, if missing) or a
            ``postgresql://`` / ``postgres://`` URL.
        table_prefix: The prefix of the store's tables.

    Returns:
        A checkpointer that owns its connections; close it when done.

    Raises:
        ValueError: an invalid ``table_prefix``, or a URL of another scheme.
        ImportError: a Postgres URL, but no Postgres driver is installed.
    """
    target = os.fspath(database)
    if _is_postgres_url(target):
        # Imported here: a SQLite user never loads the Postgres backend.
        from .checkpoint.postgres import PostgresCheckpointer

        return PostgresCheckpointer.connect(target, table_prefix=table_prefix)
    if _URL.match(target):
        raise ValueError(
            f"unsupported database URL {_redact(target)!r}: give a SQLite file path or a postgresql:// URL"
        )
    return SqliteCheckpointer(target, table_prefix=table_prefix)


def _redact(database: str) -> str:
    """The database as it may be printed: a URL's password replaced by ``***``."""
    if not _URL.match(database):
        return database
    parts = urllib.parse.urlsplit(database)
    if parts.password is None:
        return database
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{parts.username or ''}:***@{host}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _database(args: argparse.Namespace) -> str:
    if args.db:
        return str(args.db)
    return os.environ.get(DATABASE_ENV) or str(DEFAULT_PATH.expanduser())


@contextlib.contextmanager
def _opened(args: argparse.Namespace, *, create: bool = False) -> Iterator[SqlCheckpointer]:
    """The store the arguments name, closed afterwards.

    Without ``create``, a SQLite file that does not exist is an error rather
    than a new empty file: ``ilmek threads --db typo.db`` must not leave
    ``typo.db`` behind.
    """
    database = _database(args)
    shown = _redact(database)
    if not create and not _URL.match(database) and not pathlib.Path(database).expanduser().exists():
        raise _CommandFailed(f"no database at {shown} (nothing has been stored there yet)")
    try:
        checkpointer = open_checkpointer(database, args.table_prefix)
    except IlmekError:
        raise
    except ValueError as error:
        # open_checkpointer's own refusal, which already names the database.
        raise _CommandFailed(str(error)) from error
    except ImportError as error:
        raise _CommandFailed(
            f"cannot open {shown}: PostgreSQL support is not available ({error}); "
            "install it with: pip install 'ilmek[postgres]'"
        ) from error
    except Exception as error:
        # A driver's own error (a refused connection, an unreadable file): the
        # user needs its message, not a traceback.
        raise _CommandFailed(f"cannot open {shown}: {error}") from error
    try:
        yield checkpointer
    finally:
        checkpointer.close()


# --- demo -------------------------------------------------------------------------------


def _demo_hint(args: argparse.Namespace) -> str:
    """The command that answers the demo's question, with the options this one used."""
    words = [*args.prog.split(), "demo"]
    if args.db:
        words += ["--db", _redact(str(args.db))]
    if args.table_prefix != "ilmek":
        words += ["--table-prefix", args.table_prefix]
    if args.thread != DEFAULT_THREAD:
        words += ["--thread", args.thread]
    return " ".join(shlex.quote(word) for word in words)


def _print_question(pending: Sequence[Pending], args: argparse.Namespace) -> None:
    for pause in pending:
        print(question_of(pause.payload))
    print(f"answer with: {_demo_hint(args)} --answer yes   (or --answer no)")


def _print_outcome(result: Result) -> int:
    if result.status == "interrupted":
        return 0
    if result.status != "done":
        details = "; ".join(f"{node}: {error!r}" for node, error in result.errors)
        raise _CommandFailed(f"the demo ended {result.status}: {details or result.abort_reason}")
    log = result.state.get("log") or []
    print(f"done: {log[-1] if log else 'nothing happened'}")
    print("final state:")
    print(render_value(result.state))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    g = build_checkout_graph()
    database = _database(args)
    with _opened(args, create=True) as checkpointer:
        if _is_postgres_url(database):
            # SQLite creates its tables on open; Postgres waits for migrate().
            checkpointer.migrate()
        options: dict[str, Any] = {"thread_id": args.thread, "checkpointer": checkpointer}
        latest = checkpointer.get(args.thread)
        owner = latest.metadata.get("graph") if latest is not None else None
        if owner not in (None, g.name):
            # Never run the demo's graph on an application's thread.
            raise _CommandFailed(
                f"thread {args.thread!r} belongs to graph {owner!r}, not to the demo; "
                "pick another thread with --thread"
            )
        if args.answer is not None:
            if latest is None or not latest.pending:
                state = "has not started" if latest is None else f"is {latest.status}, not paused"
                raise _CommandFailed(
                    f"thread {args.thread!r} is not waiting for an answer (it {state}); "
                    f"start an order with: {_demo_hint(args)}"
                )
            result = resume(g, args.answer, **options)
            if result.status == "interrupted":
                _print_question(result.pending, args)
            return _print_outcome(result)
        if latest is not None and latest.pending:
            print(f"thread {args.thread!r} is already waiting for an answer:")
            _print_question(latest.pending, args)
            return 0
        if latest is not None and latest.status == "unfinished":
            # A run stopped mid-way (a crash): continue it, replaying its recorded
            # steps, so the order it created is not created twice.
            print(f"continuing the unfinished order on thread {args.thread!r}")
            result = run(g, None, **options)
        else:
            result = run(g, {"cart": list(CART)}, **options)
        if result.status == "interrupted":
            _print_question(result.pending, args)
        return _print_outcome(result)


# --- threads ----------------------------------------------------------------------------


def _when(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _shown_id(thread_id: str) -> str:
    """A thread id as one table cell: ids are any text, newlines included."""
    return thread_id if thread_id.isprintable() else repr(thread_id)


def _align(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as lines, each column padded to its widest cell (the last is left ragged)."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in rows
    ]


def _cmd_threads(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        # One more than asked, to know whether to say there are more.
        threads = checkpointer.list_threads(search=args.search, status=args.status, limit=args.limit + 1)
    if not threads:
        print("no threads")
        return 0
    shown = threads[: args.limit]
    rows = [
        [_shown_id(t.id), t.status, str(t.step), _when(t.updated_at), t.checkpoint_id or "-"] for t in shown
    ]
    for line in _align([["THREAD", "STATUS", "STEP", "UPDATED", "LATEST CHECKPOINT"], *rows]):
        print(line)
    if len(threads) > args.limit:
        print(f"(the {args.limit} most recently updated; --limit N shows more)")
    return 0


# --- history ----------------------------------------------------------------------------


def render_history(checkpoints: Sequence[Checkpoint], *, truncated: bool = False) -> list[str]:
    """Draw a thread's checkpoints as a tree, oldest at the top.

    A chain of checkpoints stays at one indentation; a checkpoint with several
    children opens one branch per child with box-drawing characters. A
    checkpoint whose parent is not among ``checkpoints`` is drawn as a root
    and says why (pruned, or cut off by a limit when ``truncated``).

    Args:
        checkpoints: A thread's checkpoints, in any order.
        truncated: The list was cut by a limit, so a missing parent may exist.

    Returns:
        One line per checkpoint.
    """
    by_id = {checkpoint.id: checkpoint for checkpoint in checkpoints}
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for checkpoint_id in sorted(by_id):
        parent = by_id[checkpoint_id].parent_id
        if parent is not None and parent in by_id:
            children.setdefault(parent, []).append(checkpoint_id)
        else:
            roots.append(checkpoint_id)
    latest = max(by_id, default=None)

    # Depth-first with an explicit stack: a linear history of ten thousand
    # checkpoints is ten thousand levels deep, too deep for recursion.
    drawn: list[tuple[str, Checkpoint]] = []
    stack = [(root, "", "") for root in reversed(roots)]
    while stack:
        checkpoint_id, first, rest = stack.pop()
        drawn.append((first, by_id[checkpoint_id]))
        kids = children.get(checkpoint_id, [])
        if len(kids) == 1:
            stack.append((kids[0], rest, rest))
            continue
        for index in reversed(range(len(kids))):
            last = index == len(kids) - 1
            stack.append((kids[index], rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  ")))

    rows = []
    for prefix, checkpoint in drawn:
        notes = []
        if checkpoint.pending:
            notes.append("waiting: " + ", ".join(p.id for p in checkpoint.pending))
        if checkpoint.parent_id is not None and checkpoint.parent_id not in by_id:
            notes.append("(parent not shown)" if truncated else "(parent pruned)")
        if checkpoint.id == latest:
            notes.append("(latest)")
        rows.append(
            [
                prefix + checkpoint.id,
                str(checkpoint.metadata.get("source", "?")),
                f"step {checkpoint.step}",
                checkpoint.status,
                "  ".join(notes),
            ]
        )
    return _align(rows)


def _cmd_history(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        checkpoints = checkpointer.list(args.thread, limit=args.limit)
        if not checkpoints:
            raise _CommandFailed(f"thread {args.thread!r} has no checkpoints in {_redact(_database(args))}")
        truncated = args.limit is not None and len(checkpoints) == args.limit
        for line in render_history(checkpoints, truncated=truncated):
            print(line)
    return 0


# --- show -------------------------------------------------------------------------------


def _displayable(value: Any, full: bool, depth: int = 0) -> Any:
    """``value`` as JSON types, shortened unless ``full``; what JSON lacks becomes text."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        if full or len(value) <= _MAX_TEXT:
            return value
        return f"{value[:_MAX_TEXT]}… ({len(value) - _MAX_TEXT} more characters)"
    if not full and depth >= _MAX_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())
        shown = items if full else items[:_MAX_KEYS]
        result = {str(key): _displayable(item, full, depth + 1) for key, item in shown}
        if len(items) > len(shown):
            result["…"] = f"{len(items) - len(shown)} more keys"
        return result
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else list(value)
        if full or len(items) <= _HEAD_ITEMS + _TAIL_ITEMS:
            return [_displayable(item, full, depth + 1) for item in items]
        hidden = len(items) - _HEAD_ITEMS - _TAIL_ITEMS
        return [
            *(_displayable(item, full, depth + 1) for item in items[:_HEAD_ITEMS]),
            f"… {hidden} more items …",
            *(_displayable(item, full, depth + 1) for item in items[-_TAIL_ITEMS:]),
        ]
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID | _dt.timedelta):
        return str(value)
    if attrs.has(type(value)):
        fields = {field.name: getattr(value, field.name) for field in attrs.fields(type(value))}
        return _displayable(fields, full, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        return _displayable(fields, full, depth)
    text = repr(value)
    return text if full or len(text) <= _MAX_TEXT else f"{text[:_MAX_TEXT]}…"


def render_value(value: Any, *, full: bool = False, indent: str = "") -> str:
    """A stored value as pretty JSON-ish text: short parts on one line, long ones broken up.

    Args:
        value: Any value a checkpoint holds.
        full: Print long strings and lists whole instead of shortened.
        indent: Put in front of every line but the first.
    """
    return _pretty(_displayable(value, full), indent, _LINE_WIDTH - len(indent))


def _pretty(value: Any, indent: str, width: int) -> str:
    """``value`` (JSON types) in ``width`` columns; what does not fit opens one line per item."""
    compact = json.dumps(value, ensure_ascii=False)
    if len(compact) <= width or not isinstance(value, dict | list) or not value:
        return compact
    inner = indent + "  "
    parts = []
    if isinstance(value, dict):
        for key, item in value.items():
            label = json.dumps(key, ensure_ascii=False) + ": "
            parts.append(label + _pretty(item, inner, width - 2 - len(label)))
        opening, closing = "{", "}"
    else:
        parts = [_pretty(item, inner, width - 2) for item in value]
        opening, closing = "[", "]"
    body = f",\n{inner}".join(parts)
    return f"{opening}\n{inner}{body}\n{indent}{closing}"


def _print_field(label: str, text: str) -> None:
    print(label.ljust(_LABEL_WIDTH) + text)


def _cmd_show(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        checkpoint = checkpointer.get(args.thread, args.checkpoint)
        if checkpoint is None:
            where = _redact(_database(args))
            if args.checkpoint is None or checkpointer.get(args.thread) is None:
                raise _CommandFailed(f"thread {args.thread!r} has no checkpoints in {where}")
            raise _CommandFailed(
                f"thread {args.thread!r} has no checkpoint {args.checkpoint!r}; "
                f"list them with: history {shlex.quote(args.thread)}"
            )
        pad = " " * _LABEL_WIDTH
        _print_field("thread", _shown_id(checkpoint.thread_id))
        _print_field("checkpoint", checkpoint.id)
        _print_field("parent", checkpoint.parent_id or "-")
        _print_field("step", str(checkpoint.step))
        _print_field("status", checkpoint.status)
        _print_field("written", _when(checkpoint.ts))
        _print_field("metadata", render_value(dict(checkpoint.metadata), full=args.full, indent=pad))
        if checkpoint.next:
            print("next")
            for task in checkpoint.next:
                line = f"  {task.task_key}"
                if task.is_send:
                    shown_input = render_value(task.input, full=args.full, indent="    ")
                    line += f"  (send to {task.node}) input: {shown_input}"
                print(line)
        else:
            _print_field("next", "- (nothing scheduled)")
        if checkpoint.pending:
            print("pending")
            for pause in checkpoint.pending:
                print(f"  {pause.id}  (node {pause.node})")
                print(f"    {render_value(pause.payload, full=args.full, indent='    ')}")
        channels = dict(checkpoint.channels)
        if not channels:
            _print_field("channels", "- (none written yet)")
        else:
            print("channels")
            for name, value in channels.items():
                print(f"  {name}: {render_value(value, full=args.full, indent='  ')}")
    return 0


# --- delete, prune ------------------------------------------------------------------------


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _exists(checkpointer: SqlCheckpointer, thread_id: str) -> bool:
    return checkpointer.get_thread(thread_id) is not None or checkpointer.get(thread_id) is not None


def _confirmed(question: str) -> bool:
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes"}


def _cmd_delete(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        if not _exists(checkpointer, args.thread):
            raise _CommandFailed(f"thread {args.thread!r} does not exist in {_redact(_database(args))}")
        if not args.yes:
            if not sys.stdin.isatty():
                raise _CommandFailed(
                    f"not deleting thread {args.thread!r} without confirmation: stdin is not a "
                    "terminal, so pass --yes"
                )
            count = len(checkpointer.list(args.thread))
            if not _confirmed(f"delete thread {args.thread!r} and its {_count(count, 'checkpoint')}?"):
                raise _CommandFailed("nothing deleted")
        checkpointer.delete_thread(args.thread)
    print(f"deleted thread {args.thread!r}")
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        if not _exists(checkpointer, args.thread):
            raise _CommandFailed(f"thread {args.thread!r} does not exist in {_redact(_database(args))}")
        dropped = checkpointer.prune(args.thread, keep_last=args.keep_last)
        kept = len(checkpointer.list(args.thread))
    print(f"dropped {_count(dropped, 'checkpoint')} of thread {args.thread!r}; {kept} kept")
    return 0


# --- schema -------------------------------------------------------------------------------


def _cmd_migrate(args: argparse.Namespace) -> int:
    if args.database is not None:
        args.db = args.database
    with _opened(args, create=True) as checkpointer:
        checkpointer.migrate()
        print(
            f"{checkpointer.table_prefix}_* tables up to date, schema version {checkpointer.schema_version}"
        )
    return 0


def _cmd_ddl(args: argparse.Namespace) -> int:
    if _URL.match(_database(args)):
        with _opened(args) as checkpointer:
            statements = checkpointer.ddl()
    else:
        # The SQL depends only on the dialect and the prefix: ask a throwaway
        # in-memory store rather than create the file.
        scratch = SqliteCheckpointer(":memory:", table_prefix=args.table_prefix)
        try:
            statements = scratch.ddl()
        finally:
            scratch.close()
    for statement in statements:
        print(f"{statement};")
    return 0


# --- the parser ---------------------------------------------------------------------------


def _table_prefix(text: str) -> str:
    try:
        return validate_prefix(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _store_options(parser: argparse.ArgumentParser, *, default: Any) -> None:
    parser.add_argument(
        "--db",
        metavar="DATABASE",
        default=default,
        help=f"a SQLite file path or a postgresql:// URL (default: ${DATABASE_ENV}, else {DEFAULT_PATH})",
    )
    parser.add_argument(
        "--table-prefix",
        metavar="PREFIX",
        type=_table_prefix,
        default="ilmek" if default is None else default,
        help="the prefix of the store's tables (default: ilmek)",
    )


def _program_name() -> str:
    # Installed as the `ilmek` script, argv[0] says so; under `python -m ilmek` it is __main__.py.
    name = pathlib.Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
    return "ilmek" if name == "ilmek" else "python -m ilmek"


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every command (``prog`` names the program in help and hints)."""
    prog = prog or _program_name()
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Inspect and manage ilmek checkpoint stores, or run the checkout demo.",
    )
    _store_options(parser, default=None)
    parser.set_defaults(prog=prog)
    # The store options may also follow the command; there they default to
    # "not given", so they never undo what came before the command.
    store = argparse.ArgumentParser(add_help=False)
    _store_options(store, default=argparse.SUPPRESS)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def command(
        name: str, handler: Callable[[argparse.Namespace], int], summary: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[store], help=summary, description=summary)
        sub.set_defaults(handler=handler)
        return sub

    demo = command(
        "demo",
        _cmd_demo,
        "Run the checkout demo: it creates an order and pauses to ask before charging; "
        "answer with --answer, from this or a new process.",
    )
    demo.add_argument("--thread", default=DEFAULT_THREAD, metavar="ID", help="the thread (default: demo)")
    demo.add_argument("--answer", metavar="ANSWER", help="answer the pending question (yes charges)")

    threads = command("threads", _cmd_threads, "List threads, most recently updated first.")
    threads.add_argument("--status", choices=_THREAD_STATUSES, help="only threads in this status")
    threads.add_argument("--search", metavar="TEXT", help="only threads whose id contains TEXT")
    threads.add_argument("--limit", type=_positive, default=50, metavar="N", help="at most N (default: 50)")

    history = command(
        "history", _cmd_history, "Draw a thread's checkpoint tree, oldest first, forks as branches."
    )
    history.add_argument("thread", metavar="THREAD")
    history.add_argument("--limit", type=_positive, metavar="N", help="only the N newest checkpoints")

    show = command(
        "show", _cmd_show, "Show a checkpoint: its place, status, next tasks, pauses and channel values."
    )
    show.add_argument("thread", metavar="THREAD")
    show.add_argument("checkpoint", nargs="?", metavar="CHECKPOINT", help="a checkpoint id (default: latest)")
    show.add_argument("--full", action="store_true", help="print long values whole")

    delete = command("delete", _cmd_delete, "Delete a thread: its checkpoints, journals and metadata.")
    delete.add_argument("thread", metavar="THREAD")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    prune = command(
        "prune",
        _cmd_prune,
        "Drop a thread's old checkpoints, keeping the newest N and every one a branch or pause needs.",
    )
    prune.add_argument("thread", metavar="THREAD")
    prune.add_argument("--keep-last", type=_positive, required=True, metavar="N", help="keep the N newest")

    migrate = command("migrate", _cmd_migrate, "Create or upgrade the store's tables.")
    migrate.add_argument(
        "database", nargs="?", metavar="DATABASE", help="the store, as with --db (which it overrides)"
    )

    command("ddl", _cmd_ddl, "Print the SQL that creates the store's tables, for running it yourself.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit status.

    0 on success, 1 when the command fails (the message, never a traceback,
    goes to stderr as ``ilmek: <message>``), 2 for a usage error.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        # argparse exits for --help and usage errors; callers get the status instead.
        return 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 2
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (IlmekError, _CommandFailed) as error:
        print(f"ilmek: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ilmek: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`ilmek history t | head`): stop quietly, as Unix
        # tools do, and keep Python from complaining again when it flushes stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
