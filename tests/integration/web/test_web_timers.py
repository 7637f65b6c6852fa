"""The console's inbox shows a durable timer as a sleeping thread with its wake time, never as a question."""

from __future__ import annotations

import datetime as dt
import pathlib
from typing import Any

import ilmek
import ilmek.web
from ilmek import START, channel, graph, run
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.web_support import Client


def test_a_timer_reads_sleeping_until_its_time_with_nothing_to_answer(tmp_path: pathlib.Path) -> None:
    """A thread in ctx.sleep lists with "sleeping (ctx.sleep): wakes" and its due time, and no answer form."""

    def nap(state: dict[str, Any], ctx: Any) -> None:
        ctx.sleep("nap", until=dt.datetime(2031, 2, 3, 4, 5, 6, tzinfo=dt.UTC))

    napping = graph("napping", {"log": channel.append()}).node("nap", nap).edge(START, "nap").compile()
    with SqliteCheckpointer(str(tmp_path / "store.db")) as store:
        run(napping, {}, thread_id="sleepy", checkpointer=store)
        page = Client(ilmek.web.app(store, {"napping": napping}, allow_actions=True)).get("/").text
    assert "sleeping (ctx.sleep): wakes" in page
    assert "2031-02-03 04:05:06" in page
    assert "a timer: nothing to answer" in page
