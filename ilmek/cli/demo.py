"""The ``demo`` command: the checkout flow of :mod:`ilmek.demo`, paused in one process, answered in the next.

The hint it prints names the command to type again (``ilmek``, ``python -m ilmek`` or
``$ILMEK_DEMO_COMMAND``) with the options this run was given.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import sys
from collections.abc import Sequence
from typing import Any, Final

from ..demo import CART, build_checkout_graph, question_of
from ..engine import resume, run
from ..redact import printable
from ..types import Pending, Result
from .arguments import Subcommands, _text
from .failures import _CommandFailed
from .output import _q, _say, _shell_word
from .rendering import render_value
from .stores import _database, _is_postgres, _opened, _shown_database

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


def _print_question(pending: Sequence[Pending], args: argparse.Namespace) -> None:
    for pause in pending:
        _say(printable(question_of(pause.payload)))
    _say(f"answer with: {_demo_hint(args)} --answer yes   (or --answer no)")


def _print_outcome(result: Result) -> int:
    if result.status == "interrupted":
        return 0
    if result.status != "done":
        details = "; ".join(f"{node}: {error!r}" for node, error in result.errors)
        raise _CommandFailed(f"the demo ended {result.status}: {details or result.abort_reason}")
    log = result.state.get("log") or []
    _say(printable(f"done: {log[-1] if log else 'nothing happened'}"))
    _say("final state:")
    _say(render_value(result.state))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    g = build_checkout_graph()
    with _opened(args, create=True) as checkpointer:
        if _is_postgres(_database(args)):
            # SQLite creates its tables on open; Postgres waits for migrate().
            checkpointer.migrate()
        options: dict[str, Any] = {"thread_id": args.thread, "checkpointer": checkpointer}
        latest = checkpointer.get(args.thread)
        owner = latest.metadata.get("graph") if latest is not None else None
        if owner not in (None, g.name):
            # Never run the demo's graph on an application's thread.
            raise _CommandFailed(
                f"thread {_q(args.thread)} belongs to graph {_q(str(owner))}, not to the demo; "
                "pick another thread with --thread"
            )
        if args.answer is not None:
            if latest is None or not latest.pending:
                state = "has not started" if latest is None else f"is {latest.status}, not paused"
                raise _CommandFailed(
                    f"thread {_q(args.thread)} is not waiting for an answer (it {state}); "
                    f"start an order with: {_demo_hint(args)}"
                )
            result = resume(g, args.answer, **options)
            if result.status == "interrupted":
                _print_question(result.pending, args)
            return _print_outcome(result)
        if latest is not None and latest.pending:
            _say(printable(f"thread {_q(args.thread)} is already waiting for an answer:"))
            _print_question(latest.pending, args)
            return 0
        if latest is not None and latest.status == "unfinished":
            # A run stopped mid-way (a crash): continue it, replaying its recorded
            # steps, so the order it created is not created twice.
            _say(printable(f"continuing the unfinished order on thread {_q(args.thread)}"))
            result = run(g, None, **options)
        else:
            result = run(g, {"cart": list(CART)}, **options)
        if result.status == "interrupted":
            _print_question(result.pending, args)
        return _print_outcome(result)


def add_demo_parser(commands: Subcommands) -> None:
    """Add ``demo``, which runs the checkout flow, to the commands."""
    demo = commands.add(
        "demo",
        _cmd_demo,
        "Run the checkout demo: it creates an order and pauses to ask before charging; "
        "answer with --answer, from this or a new process.",
    )
    demo.add_argument(
        "--thread", type=_text, default=DEFAULT_THREAD, metavar="ID", help="the thread (default: demo)"
    )
    demo.add_argument(
        "--answer", type=_text, metavar="ANSWER", help="answer the pending question (yes charges)"
    )
