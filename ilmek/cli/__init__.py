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
import io
import os
import pathlib
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..errors import IlmekError
from .arguments import (
    Subcommands,
    _Parser,
    _store_options,
)
from .demo import DEFAULT_THREAD as DEFAULT_THREAD
from .demo import DEMO_COMMAND_ENV as DEMO_COMMAND_ENV
from .demo import add_demo_parser
from .failures import _CommandFailed, _UsageError
from .history import add_history_parser, render_history
from .operations import (
    add_cancel_parser,
    add_delete_parser,
    add_gc_parser,
    add_prune_parser,
    add_recover_parser,
)
from .output import (
    _complain,
)
from .rendering import render_value
from .schema import add_ddl_parser, add_migrate_parser
from .stores import DATABASE_ENV as DATABASE_ENV
from .stores import (
    _secrets_in,
    open_checkpointer,
)
from .threads import add_show_parser, add_threads_parser
from .web import add_web_parser

__all__ = ["build_parser", "main", "open_checkpointer", "render_history", "render_value"]


# --- what may be printed ------------------------------------------------------------------


# --- opening a store ----------------------------------------------------------------------


# --- demo -------------------------------------------------------------------------------


# --- JSON output --------------------------------------------------------------------------


# --- threads ----------------------------------------------------------------------------


# --- history ----------------------------------------------------------------------------


# --- show -------------------------------------------------------------------------------


# --- web ----------------------------------------------------------------------------------


# --- delete, prune ------------------------------------------------------------------------


# --- operations: recover, cancel, gc ------------------------------------------------------


# --- schema -------------------------------------------------------------------------------


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

    add_delete_parser(commands)

    add_prune_parser(commands)

    add_recover_parser(commands)

    add_cancel_parser(commands)

    add_gc_parser(commands)

    add_migrate_parser(commands)

    add_web_parser(commands)

    add_ddl_parser(commands)
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
