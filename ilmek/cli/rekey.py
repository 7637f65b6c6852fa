"""The ``rekey`` command: reseal every stored value of an encrypted store under its current key.

The keys come from the environment variable ``--keys-env`` names (never
from the command line); the first key there is the current one. Progress
is printed after each batch, so an operator sees it move and can stop it
at any point: running it again finishes the work (see
:meth:`~ilmek.checkpoint.base.Checkpointer.rekey`).
"""

from __future__ import annotations

import argparse
import sys

from ..crypto import RekeyProgress
from .arguments import Subcommands, _json_option, _positive
from .failures import _CommandFailed
from .output import _print_json, _say
from .stores import _opened


def _cmd_rekey(args: argparse.Namespace) -> int:
    if not getattr(args, "keys_env", None):
        raise _CommandFailed(
            "rekey needs the keys: put them in an environment variable as id:base64key,... "
            "(the current key first) and name it with --keys-env VAR"
        )

    def report(progress: RekeyProgress) -> None:
        if not args.json:
            _say(f"rekey: {progress}")
            sys.stdout.flush()  # each batch as it commits, also through a pipe

    with _opened(args) as checkpointer:
        done = checkpointer.rekey(batch=args.batch, progress=report)
    if args.json:
        _print_json({"checked": done.checked, "rewritten": done.rewritten, "batches": done.batches})
    else:
        _say(f"rekey done: {done}")
    return 0


def add_rekey_parser(commands: Subcommands) -> None:
    """Add ``rekey``, which reseals a store's values under its current key, to the commands."""
    rekey = commands.add(
        "rekey",
        _cmd_rekey,
        "Reseal every stored value under the current key (--keys-env), online and resumable.",
    )
    rekey.add_argument(
        "--batch",
        type=_positive,
        default=500,
        metavar="N",
        help="rows per transaction: a run beside it waits at most one batch (default: 500)",
    )
    _json_option(rekey, '{"checked", "rewritten", "batches"} (row counts)')
