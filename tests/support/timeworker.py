"""A process for the time tests: ``sleep`` starts a thread that sleeps durably, then stays alive (to be
killed); ``tick`` sweeps once and prints the threads it woke.

``python -m tests.support.timeworker sleep DB THREAD EFFECTS`` / ``tick DB EFFECTS``. Effects (the steps
that ran) are appended to the EFFECTS file, one line each, so the test sees them across processes.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from typing import Any

from ilmek import START, channel, graph, run, tick
from ilmek.cli import open_checkpointer

DUE = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def sleeper(effects: str) -> Any:
    """A graph whose node records a step, sleeps until DUE, then records another."""

    def note(what: str) -> str:
        with open(effects, "a", encoding="utf-8") as out:
            out.write(what + "\n")
        return what

    def wait(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", note, f"{ctx.thread_id} before")
        ctx.sleep("nap", until=DUE)
        ctx.step("after", note, f"{ctx.thread_id} after")
        return {"log": ["woke"]}

    return graph("sleeper", {"log": channel.append()}).node("wait", wait).edge(START, "wait").compile()


def main(argv: list[str]) -> int:
    command, database = argv[0], argv[1]
    with open_checkpointer(database) as checkpointer:
        if command == "sleep":
            thread_id, effects = argv[2], argv[3]
            result = run(sleeper(effects), {}, thread_id=thread_id, checkpointer=checkpointer)
            print(json.dumps({"status": result.status}), flush=True)
            while True:  # a long-lived process (a web worker): the test kills it
                time.sleep(1)
        effects = argv[2]
        woke = tick(sleeper(effects), checkpointer, now=DUE)
        print(
            json.dumps({"woke": [r.thread_id for r in woke], "status": [r.status for r in woke]}), flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
