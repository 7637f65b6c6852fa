"""The port suite, why a thread stalled: the recursion limit is recorded on the thread (a
``RecursionLimitError``), and ``why_stalled`` tells it apart from a failed node, a cancel, a drain and a
process that died mid-superstep, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

import ilmek
from ilmek import START, Checkpointer, RecursionLimitError, channel, graph, run
from ilmek.operations import why_stalled
from tests.support.web_support import batch_graph, loop_graph, stall_after_first_superstep

pytestmark = pytest.mark.timeout(60)


def _why(checkpointer: Checkpointer, thread_id: str) -> str | None:
    info = checkpointer.get_thread(thread_id)
    assert info is not None
    return why_stalled(info)


def test_a_recursion_limit_stop_is_recorded_and_read_back(checkpointer: Checkpointer) -> None:
    """A run stopped by recursion_limit leaves the thread in error with a RecursionLimitError naming the
    limit, said as the recursion limit; recover continues it from where it stopped."""
    with pytest.raises(RecursionLimitError):
        run(loop_graph(0), {}, thread_id="rl", checkpointer=checkpointer, recursion_limit=2)
    info = checkpointer.get_thread("rl")
    assert info is not None
    assert "error" == info.status
    assert info.error is not None
    assert "ilmek.errors.RecursionLimitError" == info.error.type
    assert "recursion_limit=2" in info.error.message
    assert info.error.node is None
    assert "recursion limit" in (why_stalled(info) or "")


def test_each_cause_reads_differently(checkpointer: Checkpointer) -> None:
    """A failed node, a drain and a process gone mid-superstep each say their own reason; a
    finished thread and a paused one are not stalled."""

    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("bad input")

    failing = graph("failing", {"n": channel.last_write(0)}).node("fail", fail).edge(START, "fail").compile()
    run(failing, {}, thread_id="failed", checkpointer=checkpointer)
    assert "node 'fail' failed: ValueError" == _why(checkpointer, "failed")

    stall_after_first_superstep(batch_graph(), "crashed", checkpointer)
    assert "its process died or was killed mid-superstep" in (_why(checkpointer, "crashed") or "")

    def drain_now(state: dict[str, Any]) -> dict[str, Any]:
        ilmek.drain()
        return {"ticks": 1}

    drained = (
        graph("drained", {"ticks": channel.last_write(0)})
        .node("a", drain_now)
        .node("b", lambda state: {"ticks": 2})
        .edge(START, "a")
        .edge("a", "b")
        .compile()
    )
    try:
        assert "aborted" == run(drained, {}, thread_id="drained", checkpointer=checkpointer).status
    finally:
        ilmek.undrain()
    assert "drained" in (_why(checkpointer, "drained") or "")

    done = run(batch_graph(), {}, thread_id="done", checkpointer=checkpointer)
    assert "done" == done.status
    assert _why(checkpointer, "done") is None


def test_threads_and_show_print_why(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`ilmek threads` notes each stalled thread's reason and `ilmek show` prints it as `stalled`."""
    from ilmek import SqliteCheckpointer
    from ilmek.cli import main

    database = str(tmp_path / "why.db")
    with SqliteCheckpointer(database) as store:
        stall_after_first_superstep(batch_graph(), "crashed", store)
        with pytest.raises(RecursionLimitError):
            run(loop_graph(0), {}, thread_id="rl", checkpointer=store, recursion_limit=2)
    capsys.readouterr()
    assert 0 == main(["threads", "--db", database])
    listing = capsys.readouterr().out
    assert "stalled: no run holds it and none recorded an end" in listing
    assert "RecursionLimitError" in listing
    assert 0 == main(["show", "crashed", "--db", database])
    shown = capsys.readouterr().out
    assert "stalled" in shown
    assert "its process died or was killed mid-superstep" in shown
