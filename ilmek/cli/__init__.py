"""The ``ilmek`` command line (``python -m ilmek``): inspect and manage a checkpoint store.

Commands: ``demo`` (the checkout flow, paused in one process and answered in
another), ``threads``, ``history`` (the checkpoint tree), ``show``,
``delete``, ``prune``, ``migrate`` and ``ddl``; for operations ``recover``
(continue stalled threads with graphs named ``MODULE:NAME``), ``cancel`` (ask
a running thread to stop) and ``gc`` (delete or prune old threads). A store
is a SQLite file path, a ``postgresql://`` URL or a libpq keyword string
(``host=... dbname=...``), given with ``--db`` or ``ILMEK_DB``; without one
it is the default SQLite file. Only the standard library (``argparse``) and
the public checkpointer API are used; how values and trees are drawn for a
terminal belongs in this package too.

Everything printed that came from a store or from the command line goes
through :func:`ilmek.redact.printable` (and, on stderr, through
:func:`ilmek.redact.mask_secrets`), so stored text cannot drive the terminal
and no password is shown. Bad input ends in one ``ilmek: ...`` line on stderr
and exit status 2 (usage) or 1 (failure), never in a traceback.

One module per concern: :mod:`~ilmek.cli.program` holds :func:`main` and
:func:`build_parser`; the shared parts are :mod:`~ilmek.cli.arguments`
(argument types, the options several commands take), :mod:`~ilmek.cli.stores`
(which store, and opening it), :mod:`~ilmek.cli.output` (what is printed, and
how), :mod:`~ilmek.cli.rendering` (stored values) and
:mod:`~ilmek.cli.failures`. Each command module adds its own sub-parsers:
:mod:`~ilmek.cli.demo`, :mod:`~ilmek.cli.threads` (``threads``, ``show``),
:mod:`~ilmek.cli.history`, :mod:`~ilmek.cli.operations` (``delete``,
``prune``, ``recover``, ``cancel``), :mod:`~ilmek.cli.gc`, :mod:`~ilmek.cli.schema`
(``migrate``, ``ddl``) and :mod:`~ilmek.cli.web`. This module only re-exports.
"""

from __future__ import annotations

# `as`: re-exported, so that `from ilmek.cli import DATABASE_ENV` type-checks too.
from .demo import DEFAULT_THREAD as DEFAULT_THREAD
from .demo import DEMO_COMMAND_ENV as DEMO_COMMAND_ENV
from .history import render_history
from .program import build_parser, main
from .rendering import render_value
from .stores import DATABASE_ENV as DATABASE_ENV
from .stores import open_checkpointer

__all__ = ["build_parser", "main", "open_checkpointer", "render_history", "render_value"]
