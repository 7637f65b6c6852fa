"""Serving the console: the threaded ``wsgiref`` server, ``ilmek web`` in a real process, the package data."""

from __future__ import annotations

import contextlib
import http.client
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from typing import Any

import pytest

import ilmek
from ilmek import InMemoryCheckpointer, SqliteCheckpointer
from ilmek.cli import main
from tests.support.cli_support import run_module
from tests.support.web_support import THREADS, fetch, populate, serving, start_web

pytestmark = pytest.mark.timeout(60)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_the_server_answers_over_http_on_loopback(tmp_path: pathlib.Path) -> None:
    """make_server on port 0: the inbox over a socket, bound to 127.0.0.1 only."""
    store = SqliteCheckpointer(tmp_path / "s.db")
    populate(store, hostile=False)
    with serving(store) as server:
        assert "127.0.0.1" == server.server_address[0]
        status, body = fetch(server.url)
        assert 200 == status
        assert THREADS["waiting"] in body
    store.close()


def test_the_server_answers_only_to_loopback_host_names(tmp_path: pathlib.Path) -> None:
    """localhost and 127.0.0.1 with the port pass; another Host (DNS rebinding) is refused."""
    store = InMemoryCheckpointer()
    with serving(store) as server:
        port = server.server_port
        assert 200 == fetch(f"http://127.0.0.1:{port}/", host=f"localhost:{port}")[0]
        assert 400 == fetch(f"http://127.0.0.1:{port}/", host=f"rebound.example:{port}")[0]


def test_a_slow_request_does_not_hold_up_the_others() -> None:
    """While one request waits on a slow store, another is answered (a thread per request)."""
    release = threading.Event()

    class Slow(InMemoryCheckpointer):
        def list_threads(self, *args: Any, **kwargs: Any) -> list[ilmek.ThreadInfo]:
            if kwargs.get("search") == "slow":
                release.wait(10)
            return super().list_threads(*args, **kwargs)

    with serving(Slow()) as server:
        slow: list[int] = []
        waiting = threading.Thread(target=lambda: slow.append(fetch(server.url + "?q=slow")[0]))
        waiting.start()
        time.sleep(0.2)
        assert 200 == fetch(server.url)[0]
        assert [] == slow
        release.set()
        waiting.join(10)
        assert [200] == slow


def test_the_request_log_escapes_what_a_client_sends(capfd: pytest.CaptureFixture[str]) -> None:
    """A request line holding an escape character is logged with \\x1b, not the raw control."""
    from ilmek.web.serve import make_server

    server = make_server(InMemoryCheckpointer(), port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=5) as connection:
            connection.sendall(b"GET /\x1b[2J HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            # Read to the end (HTTP/1.0: the server closes), or the server's write may fail.
            while connection.recv(65536):
                pass
        # The line is written once the response is out: wait for it.
        logged = ""
        deadline = time.monotonic() + 5
        while "GET" not in logged and time.monotonic() < deadline:
            time.sleep(0.05)
            logged += capfd.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert "\\x1b[2J" in logged
    assert "\x1b" not in logged


# --- ilmek web ---------------------------------------------------------------------------------


def test_web_has_help_naming_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    """ilmek web --help lists --graph, --host, --port and --allow-actions."""
    assert 0 == main(["web", "--help"])
    shown = capsys.readouterr().out
    for option in ("--graph MODULE:GRAPH", "--host HOST", "--port PORT", "--allow-actions", "127.0.0.1"):
        assert option in shown


def test_web_refuses_a_missing_store_a_bad_graph_and_a_bad_port(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line on stderr, exit status 1, for each; no database file is created."""
    missing = tmp_path / "nowhere.db"
    assert 1 == main(["web", "--db", str(missing), "--port", "0"])
    assert "no database at" in capsys.readouterr().err
    assert not missing.exists()
    SqliteCheckpointer(tmp_path / "here.db").close()
    assert 1 == main(["web", "--db", str(tmp_path / "here.db"), "--graph", "no_such_module:g"])
    assert "cannot import module 'no_such_module'" in capsys.readouterr().err
    assert 1 == main(["web", "--db", str(tmp_path / "here.db"), "--port", "70000"])
    assert "--port must be between 0 and 65535" in capsys.readouterr().err


def test_ilmek_web_serves_the_store_and_stops_cleanly_on_ctrl_c(tmp_path: pathlib.Path) -> None:
    """A real process: prints the URL, serves the thread pages with the graph, exits 0 on SIGINT."""
    store = SqliteCheckpointer(tmp_path / "shop.db")
    populate(store, hostile=False)
    store.close()
    process, first = start_web(
        "--db",
        str(tmp_path / "shop.db"),
        "--port",
        "0",
        "--graph",
        "tests.support.web_support:checkout_graph",
        "--allow-actions",
        home=tmp_path,
    )
    try:
        assert first.startswith("ilmek web console on http://127.0.0.1:")
        assert "(actions on; graphs: checkout)" in first
        url = first.split(" on ", 1)[1].split(" ", 1)[0]
        status, body = fetch(url + "thread?id=" + THREADS["waiting"])
        assert 200 == status
        assert 'name="option.0"' in body
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=10)
    assert 0 == process.returncode
    assert "stopped" in out
    assert "Traceback" not in err


def test_web_help_names_the_default_port_and_the_default_is_that_port(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--help says the port defaults to 8765; started with no --port, ilmek web does try 8765."""
    assert 0 == main(["web", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--port PORT the port (default: 8765; 0 picks a free one)" in shown
    SqliteCheckpointer(tmp_path / "shop.db").close()
    environment = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    with socket.socket() as taken:
        # Held here, so the command cannot serve on it: it must say it tried 8765.
        with contextlib.suppress(OSError):  # someone else has it: the command cannot get it either
            taken.bind(("127.0.0.1", 8765))
            taken.listen()
        try:
            started = subprocess.run(
                [sys.executable, "-m", "ilmek", "web", "--db", str(tmp_path / "shop.db")],
                cwd=REPO_ROOT,
                env=environment,
                capture_output=True,
                text=True,
                timeout=20,
            )
        except subprocess.TimeoutExpired as still_serving:
            pytest.fail(f"ilmek web served somewhere other than 8765: {still_serving.stdout!r}")
    assert 1 == started.returncode
    assert started.stderr.startswith("ilmek: cannot listen on '127.0.0.1' port 8765")


@pytest.mark.parametrize("actions", [[], ["--allow-actions"]], ids=["read-only", "actions"])
def test_the_readmes_web_command_serves_the_demos_paused_thread(
    tmp_path: pathlib.Path, actions: list[str]
) -> None:
    """`ilmek demo`, then `ilmek web --graph ilmek.demo:build_checkout_graph` on the same default file.

    Both real processes, with no --db (the default file in HOME, as the README runs them):
    the inbox lists the demo's paused thread with its question, and its page draws.
    """
    demo = run_module(tmp_path, "demo")
    assert 0 == demo.returncode, demo.stderr
    assert "Charge 249.9?" in demo.stdout
    assert (tmp_path / ".ilmek" / "checkpoints.db").is_file()
    process, first = start_web(
        "--graph", "ilmek.demo:build_checkout_graph", *actions, "--port", "0", home=tmp_path
    )
    try:
        assert first.startswith("ilmek web console on http://127.0.0.1:"), first
        mode = "actions on" if actions else "read-only"
        assert f"({mode}; graphs: checkout)" in first
        url = first.split(" on ", 1)[1].split(" ", 1)[0]
        status, inbox = fetch(url)
        assert 200 == status
        assert 'href="/thread?id=demo"' in inbox
        assert "Charge 249.9?" in inbox
        status, page = fetch(url + "thread?id=demo")
        assert 200 == status
        assert "Charge 249.9?" in page
        assert "<svg" in page
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=10)
    assert 0 == process.returncode
    assert "stopped" in out
    assert "Traceback" not in err


def test_ilmek_web_warns_when_listening_beyond_this_machine(tmp_path: pathlib.Path) -> None:
    """--host 0.0.0.0: a warning that there is no login."""
    SqliteCheckpointer(tmp_path / "shop.db").close()
    process, first = start_web(
        "--db", str(tmp_path / "shop.db"), "--host", "0.0.0.0", "--port", "0", home=tmp_path
    )
    try:
        assert "read-only" in first
        assert process.stdout is not None
        assert process.stdout.readline().startswith("warning: listening beyond this machine, with no login")
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=10)
    assert 0 == process.returncode


def test_ilmek_web_says_when_the_port_is_taken(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port in use: one line naming the address, exit status 1."""
    SqliteCheckpointer(tmp_path / "shop.db").close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert 1 == main(["web", "--db", str(tmp_path / "shop.db"), "--port", str(port)])
    assert f"cannot listen on '127.0.0.1' port {port}" in capsys.readouterr().err


# --- the package -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_carries_the_stylesheet(tmp_path: pathlib.Path) -> None:
    """A wheel built from the source holds ilmek/web/static/console.css (package data)."""
    source = tmp_path / "src"
    shutil.copytree(REPO_ROOT / "ilmek", source / "ilmek", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.rst", "LICENSE"):
        shutil.copy(REPO_ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=source,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "ilmek/web/static/console.css" in archive.namelist()


def test_importing_ilmek_web_imports_no_framework() -> None:
    """ilmek.web uses the standard library only: neither Django nor Flask is loaded."""
    code = (
        "import sys, ilmek.web; print(sorted(m for m in ('django', 'flask', 'werkzeug') if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert "[]" == found.stdout.strip()


def test_http_client_sees_a_303_after_an_action(tmp_path: pathlib.Path) -> None:
    """Over a socket, a POST with a valid token answers 303 with a Location to the thread page."""
    store = SqliteCheckpointer(tmp_path / "s.db")
    populate(store, hostile=False)
    with serving(store, allow_actions=True) as server:
        token = server.console.guard.token("cancel", THREADS["stalled"])
        connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
        connection.request(
            "POST",
            f"/action/cancel?id={THREADS['stalled']}",
            body=f"token={token}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        response = connection.getresponse()
        assert 303 == response.status
        assert response.getheader("Location", "").startswith(f"/thread?id={THREADS['stalled']}&tone=error")
        connection.close()
    store.close()
