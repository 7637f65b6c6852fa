"""The ``worker`` command: a loop of :func:`ilmek.tick` (and :func:`ilmek.recover`) for a deploy.

It is nothing more than that loop and a signal handler: on SIGTERM or SIGINT
it calls :func:`ilmek.drain`, so the runs in flight stop at their next superstep boundary
(the superstep in flight finishes and commits, the hold is given back), the
loop ends and the command exits 0. A thread stopped that way is continued by
the next worker (``--recover-after``) or ``ilmek recover``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..operations import recover
from ..process_drain import drain, draining, undrain
from ..redact import printable_json
from ..sweep import tick
from ..types import Result
from .arguments import Subcommands, _duration, _json_option
from .operations import _loaded_graphs
from .output import _q, _say
from .stores import _opened


@contextlib.contextmanager
def _stopped_by_signals(stopping: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stopping`` instead of killing the process (restored afterwards)."""

    def stop(signum: int, frame: Any) -> None:
        drain()  # the runs in flight stop at their next superstep boundary
        stopping.set()

    previous = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if stopping.is_set() and draining():
            undrain()  # the command is over; a program that called main() may run again


def _log_line(document: dict[str, Any]) -> None:
    """One JSON document on one line of stdout (a log line), terminal escapes escaped."""
    print(printable_json(json.dumps(document, ensure_ascii=False)), flush=True)


def _report(args: argparse.Namespace, woke: list[Result], recovered: list[Result]) -> None:
    if args.json:
        _log_line(
            {
                "event": "swept",
                "at": time.time(),
                "woke": [{"thread": r.thread_id, "status": r.status} for r in woke],
                "recovered": [{"thread": r.thread_id, "status": r.status} for r in recovered],
            }
        )
    elif woke or recovered:
        woken = ", ".join(f"{_q(r.thread_id)} {r.status}" for r in woke) or "-"
        continued = ", ".join(f"{_q(r.thread_id)} {r.status}" for r in recovered) or "-"
        _say(f"woke {woken}; recovered {continued}")


def _cmd_worker(args: argparse.Namespace) -> int:
    graphs = _loaded_graphs(args.graphs)
    stopping = threading.Event()
    log = sys.stdout

    def announce(event: str, message: str) -> None:
        with contextlib.redirect_stdout(log):
            if args.json:
                _log_line({"event": event, "at": time.time()})
            else:
                _say(message)

    with _stopped_by_signals(stopping), _opened(args) as checkpointer:
        announce("started", f"worker started: {', '.join(sorted(graphs))}; stop with SIGTERM or Ctrl-C")
        # What the graphs' nodes print is theirs: under --json stdout carries the log lines alone.
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            while not stopping.is_set():
                woke = tick(graphs, checkpointer)
                recovered: list[Result] = []
                if args.recover_after is not None and not stopping.is_set():
                    recovered = recover(graphs, checkpointer, older_than=args.recover_after)
                with contextlib.redirect_stdout(log):
                    _report(args, woke, recovered)
                stopping.wait(args.every)
    announce("stopped", "worker stopped: the runs in flight committed and gave their threads back")
    return 0


def add_worker_parser(commands: Subcommands) -> None:
    """Add ``worker``, a loop of tick and recover until SIGTERM or SIGINT, to the commands."""
    worker = commands.add(
        "worker",
        _cmd_worker,
        "Apply due deadlines and wake due timers (tick) every --every, and continue stalled threads "
        "(recover) idle for --recover-after; SIGTERM or SIGINT finish the superstep in flight, commit, "
        "give back the holds and exit 0. Safe to run on many machines at once.",
    )
    worker.add_argument(
        "--graph",
        dest="graphs",
        action="append",
        required=True,
        metavar="MODULE:GRAPH",
        help="a graph whose threads this worker runs (module.path:name; repeat for several)",
    )
    worker.add_argument(
        "--every", type=_duration, default=1.0, metavar="SPAN", help="how often to sweep (default 1s)"
    )
    worker.add_argument(
        "--recover-after",
        type=_duration,
        metavar="SPAN",
        help="also continue stalled threads idle that long (10m; longer than your slowest node); "
        "default: do not recover",
    )
    _json_option(
        worker,
        'one JSON document per line: {"event": "started"}, {"event": "swept", "at", "woke": '
        '[{"thread", "status"}], "recovered": [...]} after each sweep, {"event": "stopped"}',
    )
