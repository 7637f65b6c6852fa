"""The console's Recover off the request, over a real socket: a looping thread's Recover answers at once,
the run goes on in the console's background pool, the page says the console's own process holds it, and
closing the server stops the run at its next superstep boundary, its thread given back."""

from __future__ import annotations

import html
import http.client
import os
import pathlib
import time

import pytest

from ilmek import RecursionLimitError, SqliteCheckpointer, run
from tests.support.web_support import fetch, loop_graph, serving

pytestmark = pytest.mark.timeout(60)


def _post(port: int, path: str, token: str) -> tuple[int, str, float]:
    """POST a console form over a socket; its status, Location and how long it took."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    began = time.monotonic()
    connection.request(
        "POST", path, body=f"token={token}", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    response = connection.getresponse()
    took = time.monotonic() - began
    location = response.getheader("Location", "")
    connection.close()
    return response.status, location, took


def test_recover_of_a_looping_thread_returns_at_once_and_the_run_goes_on(tmp_path: pathlib.Path) -> None:
    """Recover answers 303 at once (not when the run ends: it never does); the thread page says the run
    goes on in the console's process (its pid), which holds the thread; closing the server stops the run
    and gives it back."""
    store = SqliteCheckpointer(tmp_path / "s.db")
    looper = loop_graph(delay=0.2)
    with pytest.raises(RecursionLimitError):
        run(looper, {}, thread_id="loop", checkpointer=store, recursion_limit=2)
    with serving(store, {"ticker": looper}, allow_actions=True) as server:
        token = server.console.guard.token("recover", "loop")
        status, location, took = _post(server.server_port, "/action/recover?id=loop", token)
        assert 303 == status
        # The run it started goes on until the server closes: a Recover that waited for it would never
        # answer. 20 s is room for a loaded machine, not a speed claim.
        assert took < 20.0
        info = store.get_thread("loop")
        assert info is not None
        assert info.running
        code, page = fetch(f"http://127.0.0.1:{server.server_port}{location}")
        assert 200 == code
        text = html.unescape(page)
        assert f"Recovering in the console's process (pid {os.getpid()})" in text
        assert f"Running in the console's process (pid {os.getpid()})" in text
        assert 'http-equiv="refresh"' in page or "data-refresh" in page
        steps = info.step
        time.sleep(0.6)
        moved = store.get_thread("loop")
        assert moved is not None
        assert moved.step > steps  # the run goes on after the request returned
    stopped = store.get_thread("loop")
    assert stopped is not None
    assert not stopped.running
    assert stopped.cancelled is not None
    assert "the web console stopped" == stopped.cancelled.reason
    store.close()


def test_the_pool_is_bounded_and_says_so(tmp_path: pathlib.Path) -> None:
    """With one background run allowed, a second thread's Recover is refused with the limit named and
    nothing run."""
    import ilmek.web

    store = SqliteCheckpointer(tmp_path / "s.db")
    looper = loop_graph(delay=0.2)
    for thread_id in ("one", "two"):
        with pytest.raises(RecursionLimitError):
            run(looper, {}, thread_id=thread_id, checkpointer=store, recursion_limit=2)
    console = ilmek.web.Console(store, {"ticker": looper}, allow_actions=True, background_runs=1)
    pool = console.background
    try:
        first = ilmek.web.actions.recover(store, console.graphs, "one", None, {}, background=pool)
        assert "going on" in first.text or "Recovering" in first.text
        before = store.get_thread("two")
        second = ilmek.web.actions.recover(store, console.graphs, "two", None, {}, background=pool)
        assert "error" == second.tone
        assert "its limit" in second.text
        after = store.get_thread("two")
        assert before is not None
        assert after is not None
        assert before.checkpoint_id == after.checkpoint_id
    finally:
        console.close()
        store.close()
