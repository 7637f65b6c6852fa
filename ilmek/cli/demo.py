"""The ``demo`` command: the checkout flow of :mod:`ilmek.demo`, paused in one process, answered in the next.

The hint it prints names the command to type again (``ilmek``, ``python -m ilmek`` or
``$ILMEK_DEMO_COMMAND``) with the options this run was given.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pathlib
import shutil
import sys
from typing import Any, Final

import attrs

from ..checkpoint.base import Checkpointer
from ..checkpoint.sqlite import DEFAULT_PATH
from ..demo import CART, build_checkout_graph, question_of
from ..engine import resume, run
from ..redact import printable
from ..types import Pending, Result
from .arguments import Subcommands, _json_option, _text
from .failures import _CommandFailed
from .output import _json_value, _print_json, _q, _say, _shell_word
from .rendering import render_value
from .stores import DATABASE_ENV, _database, _is_postgres, _opened, _shown_database

DEMO_COMMAND_ENV: Final = "ILMEK_DEMO_COMMAND"
"""Set by a wrapper (``scripts/demo``) to the words that run the demo, for its hints."""

DEFAULT_THREAD: Final = "demo"


def _invocation() -> str:
    """How the user started this process, as words to type again (``ilmek``, ``python3 -m ilmek``)."""
    original = getattr(sys, "orig_argv", [])
    for index, word in enumerate(original[1:-1], start=1):
        if word == "-m" and original[index + 1] == "ilmek":
            return f"{_shell_word(original[0])} -m ilmek"
    script = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if pathlib.Path(script).stem == "ilmek":
        on_path = shutil.which("ilmek")
        with contextlib.suppress(OSError):
            if on_path is not None and os.path.samefile(on_path, script):
                return "ilmek"
        return _shell_word(script)
    return "python -m ilmek"


def _demo_hint(args: argparse.Namespace) -> str:
    """The command that answers the demo's question, with the options this one used."""
    command = printable(os.environ.get(DEMO_COMMAND_ENV, "").strip()) or f"{_invocation()} demo"
    words = []
    if args.db:
        words += ["--db", _shown_database(str(args.db))]
    if args.table_prefix != "ilmek":
        words += ["--table-prefix", args.table_prefix]
    if args.thread != DEFAULT_THREAD:
        words += ["--thread", args.thread]
    return " ".join([command, *(_shell_word(word) for word in words)])


def _where(args: argparse.Namespace) -> str:
    """The demo's first line: which store it writes to, and how to pick another."""
    return printable(
        f"the demo keeps thread {_q(args.thread)} in {_shown_database(_database(args))} "
        f"(another store: --db DATABASE or ${DATABASE_ENV})"
    )


@attrs.frozen(kw_only=True)
class _Outcome:
    """Where the demo left its thread: the pauses it waits on, or the finished run; what the nodes printed."""

    pending: tuple[Pending, ...] = ()
    result: Result | None = None
    printed: str = ""


def _print_outcome(args: argparse.Namespace, outcome: _Outcome) -> int:
    result = outcome.result
    if result is not None and result.status not in ("interrupted", "done"):
        details = "; ".join(f"{node}: {error!r}" for node, error in result.errors)
        raise _CommandFailed(f"the demo ended {result.status}: {details or result.abort_reason}")
    done = result is not None and result.status == "done"
    log = (result.state.get("log") or []) if result is not None and done else []
    if args.json:
        _print_json(
            {
                "database": _shown_database(_database(args)),
                "thread": args.thread,
                "status": "done" if done else "interrupted",
                "questions": [question_of(pause.payload) for pause in outcome.pending],
                "answer_with": None if done else f"{_demo_hint(args)} --answer yes",
                "outcome": log[-1] if log else None,
                "state": _json_value(result.state) if result is not None and done else None,
                "printed": outcome.printed.splitlines(),
            }
        )
        return 0
    if not done:
        for pause in outcome.pending:
            _say(printable(question_of(pause.payload)))
        _say(f"answer with: {_demo_hint(args)} --answer yes   (or --answer no)")
        return 0
    _say(printable(f"done: {log[-1] if log else 'nothing happened'}"))
    _say("final state:")
    _say(render_value(result.state if result is not None else None))
    return 0


def _demo_run(args: argparse.Namespace, checkpointer: Checkpointer) -> _Outcome:
    """Start, continue or answer the demo's order on the thread; what the nodes print is kept for --json."""
    g = build_checkout_graph()
    options: dict[str, Any] = {"thread_id": args.thread, "checkpointer": checkpointer}
    latest = checkpointer.get(args.thread)
    owner = latest.metadata.get("graph") if latest is not None else None
    if owner not in (None, g.name):
        # Never run the demo's graph on an application's thread.
        raise _CommandFailed(
            f"thread {_q(args.thread)} belongs to graph {_q(str(owner))}, not to the demo; "
            "pick another thread with --thread"
        )
    if args.answer is not None and (latest is None or not latest.pending):
        state = "has not started" if latest is None else f"is {latest.status}, not paused"
        raise _CommandFailed(
            f"thread {_q(args.thread)} is not waiting for an answer (it {state}); "
            f"start an order with: {_demo_hint(args)}"
        )
    if not args.json:
        # First, before the nodes print anything: which file (or server) the demo writes to.
        _say(_where(args))
    if args.answer is None and latest is not None and latest.pending:
        if not args.json:
            _say(printable(f"thread {_q(args.thread)} is already waiting for an answer:"))
        return _Outcome(pending=latest.pending)
    # The nodes print their side effects; under --json stdout is the document's alone.
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed) if args.json else contextlib.nullcontext():
        if args.answer is not None:
            result = resume(g, args.answer, **options)
        elif latest is not None and latest.status == "unfinished":
            # A run stopped mid-way (a crash): continue it, replaying its recorded
            # steps, so the order it created is not created twice.
            _say(printable(f"continuing the unfinished order on thread {_q(args.thread)}"))
            result = run(g, None, **options)
        else:
            result = run(g, {"cart": list(CART)}, **options)
    return _Outcome(pending=result.pending, result=result, printed=printed.getvalue())


def _cmd_demo(args: argparse.Namespace) -> int:
    with _opened(args, create=True) as checkpointer:
        if _is_postgres(_database(args)):
            # SQLite creates its tables on open; Postgres waits for migrate().
            checkpointer.migrate()
        outcome = _demo_run(args, checkpointer)
    return _print_outcome(args, outcome)


def add_demo_parser(commands: Subcommands) -> None:
    """Add ``demo``, which runs the checkout flow, to the commands."""
    demo = commands.add(
        "demo",
        _cmd_demo,
        "Run the checkout demo: it creates an order and pauses to ask before charging; "
        f"answer with --answer, from this or a new process. It writes to {DEFAULT_PATH} unless "
        f"--db or ${DATABASE_ENV} names another store (its first line says which).",
    )
    demo.add_argument(
        "--thread", type=_text, default=DEFAULT_THREAD, metavar="ID", help="the thread (default: demo)"
    )
    demo.add_argument(
        "--answer", type=_text, metavar="ANSWER", help="answer the pending question (yes charges)"
    )
    _json_option(
        demo,
        '{"database", "thread", "status" (interrupted or done), "questions", "answer_with", "outcome", '
        '"state", "printed" (what the nodes printed)}',
    )
