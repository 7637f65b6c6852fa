"""``ilmek.drain()`` in a host's own process: SIGTERM mid-superstep (its handler drains, as the examples'
gunicorn config does) finishes that superstep, commits, gives the thread back and exits; recover in
another process continues the thread with nothing lost or repeated."""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ilmek import recover
from ilmek.checkpoint.sqlite import SqliteCheckpointer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(120)

HOST = """
import json
import os
import signal
import sys
import threading
import time

import ilmek
from ilmek import START, channel, graph

EFFECTS = os.environ["TEST_EFFECTS"]


def note(what):
    with open(EFFECTS, "a", encoding="utf-8") as out:
        out.write(what + "\\n")
    return what


def slow():
    note("slow started")
    time.sleep(2)
    return note("slow done")


def first(state, ctx):
    ctx.step("slow", slow)
    return {"log": ["first"]}


def second(state, ctx):
    ctx.step("second", note, "second")
    return {"log": ["second"]}


flow = (graph("flow", {"log": channel.append()}).node("first", first).node("second", second)
        .edge(START, "first").edge("first", "second").compile())

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda signum, frame: ilmek.drain())
    outcome = {}

    def request():  # a web request's thread, running the graph
        with ilmek.SqliteCheckpointer(sys.argv[1]) as store:
            result = ilmek.run(flow, {}, thread_id="t", checkpointer=store)
            outcome.update(status=result.status, reason=result.abort_reason)
            try:
                ilmek.run(flow, {}, thread_id="late", checkpointer=store)
            except ilmek.DrainingError as error:
                outcome.update(late=str(error))

    worker = threading.Thread(target=request)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
    print(json.dumps(outcome), flush=True)
"""


def _effects(path: pathlib.Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_sigterm_drains_the_run_in_flight_and_recover_continues_it(tmp_path: pathlib.Path) -> None:
    """SIGTERM during a 2 s step: the step completes and commits, the run ends aborted ("draining"), a
    run asked after the drain is refused with nothing written, the process exits 0 holding nothing, and
    recover finishes the thread without running the slow step again."""
    (tmp_path / "host.py").write_text(textwrap.dedent(HOST), encoding="utf-8")
    effects = tmp_path / "effects.txt"
    database = str(tmp_path / "store.db")
    environment = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}",
        "TEST_EFFECTS": str(effects),
    }
    host = subprocess.Popen(
        [sys.executable, str(tmp_path / "host.py"), database],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while "slow started" not in _effects(effects):
        assert host.poll() is None, host.communicate()
        assert time.monotonic() < deadline, "the host never started the slow step"
        time.sleep(0.05)
    host.send_signal(signal.SIGTERM)
    out, err = host.communicate(timeout=60)
    assert 0 == host.returncode, err
    outcome = json.loads(out)
    assert ("aborted", "draining") == (outcome["status"], outcome["reason"])
    assert "draining" in outcome["late"]
    assert "'late'" in outcome["late"]
    assert ["slow started", "slow done"] == _effects(effects)
    sys.path.insert(0, str(tmp_path))
    os.environ["TEST_EFFECTS"] = str(effects)
    try:
        # The test's own module, written above: by name, as no installed package provides it.
        host_module = importlib.import_module("host")

        with SqliteCheckpointer(database) as store:
            assert store.get_thread("late") is None  # the refused run wrote nothing
            info = store.get_thread("t")
            assert info is not None
            assert not info.running
            assert info.cancelled is not None
            assert "draining" == info.cancelled.reason
            (done,) = recover(host_module.flow, store)
            assert ("done", ["first", "second"]) == (done.status, done.state["log"])
        assert ["slow started", "slow done", "second"] == _effects(effects)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("host", None)
        os.environ.pop("TEST_EFFECTS", None)


def test_the_example_gunicorn_hook_drains_then_hands_sigterm_to_gunicorn() -> None:
    """examples/gunicorn_conf.py's post_worker_init makes a real SIGTERM call ilmek.drain() and then the
    handler gunicorn had installed (its graceful stop)."""
    import ilmek
    from examples import gunicorn_conf

    heard: list[int] = []
    original = signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
    try:
        gunicorn_conf.post_worker_init(None)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ilmek.draining()
        assert [signal.SIGTERM] == heard
    finally:
        signal.signal(signal.SIGTERM, original)
        ilmek.undrain()
