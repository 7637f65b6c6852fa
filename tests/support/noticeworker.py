"""A process for the notice tests: runs a graph that pauses, and its ``on_pause`` hook writes the notice's
id to a file and kills its own process with SIGKILL: a crash after the pause's commit, before the notice
was marked delivered.

``python -m tests.support.noticeworker DB THREAD SEEN``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from ilmek import START, PauseNotice, answers, channel, graph, run
from ilmek.cli import open_checkpointer


def approval(on_pause: Callable[[PauseNotice], Any]) -> Any:
    """A graph that asks one question, with ``on_pause`` bound."""

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt({"question": "Ship?"}, answers=answers.choice("yes", "no"))]}

    builder = graph("noticed", {"log": channel.append()}).node("ask", ask).edge(START, "ask")
    return builder.compile(on_pause=on_pause)


def main(argv: list[str]) -> int:
    database, thread_id, seen = argv

    def die(notice: PauseNotice) -> None:
        with open(seen, "w", encoding="utf-8") as out:
            out.write(notice.id)
        os.kill(os.getpid(), signal.SIGKILL)

    with open_checkpointer(database) as checkpointer:
        run(approval(die), {}, thread_id=thread_id, checkpointer=checkpointer)
    return 0


ASKING = approval(lambda notice: None)
"""The same graph for the console to answer with (``--graph tests.support.noticeworker:ASKING``)."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
