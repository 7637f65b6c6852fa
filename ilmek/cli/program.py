"""The program: :func:`main`, and :func:`build_parser`, whose commands each command module adds.

Imports flow one way: this module imports the command modules, they import
the shared ones (arguments, stores, output, rendering, failures), and no
command module imports another.
"""

from __future__ import annotations

import argparse
import io
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Final

from .. import __version__
from ..errors import IlmekError
from .arguments import Subcommands, _Parser, _store_options
from .demo import add_demo_parser
from .failures import _CommandFailed, _UsageError
from .gc import add_gc_parser
from .history import add_history_parser
from .operations import add_cancel_parser, add_delete_parser, add_prune_parser, add_recover_parser
from .output import _complain
from .rekey import add_rekey_parser
from .schema import add_ddl_parser, add_migrate_parser
from .stores import _secrets_in
from .threads import add_show_parser, add_threads_parser
from .web import add_web_parser
from .worker import add_worker_parser

# One per command, in the order `--help` lists them.
_COMMAND_PARSERS: Final[tuple[Callable[[Subcommands], None], ...]] = (
    add_demo_parser,
    add_threads_parser,
    add_history_parser,
    add_show_parser,
    add_delete_parser,
    add_prune_parser,
    add_recover_parser,
    add_cancel_parser,
    add_gc_parser,
    add_migrate_parser,
    add_rekey_parser,
    add_web_parser,
    add_worker_parser,
    add_ddl_parser,
)


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
    for add_parser in _COMMAND_PARSERS:
        add_parser(commands)
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
