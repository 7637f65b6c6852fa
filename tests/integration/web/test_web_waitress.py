"""``ilmek web --server waitress``: the console under waitress, in a process of its own, on a real socket.

The same console (host names, login, pages) under the production server of
the ``web`` extra, which half-sent requests cannot starve either; and a
plain refusal, naming the extra, where waitress is not installed.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import threading
import time

import pytest

from ilmek import SqliteCheckpointer
from tests.integration.web.test_web_slow_clients import slowloris
from tests.support.conftest_postgres import unavailable
from tests.support.web_support import REPO_ROOT, fetch, populate, port_of, send, start_web, stop_web, url_of

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> pathlib.Path:
    """The sample threads in a SQLite file."""
    store = SqliteCheckpointer(tmp_path / "console.db")
    populate(store, hostile=False)
    store.close()
    return tmp_path / "console.db"


def test_the_console_under_waitress_serves_refuses_foreign_hosts_and_outlasts_slowloris(
    tmp_path: pathlib.Path, db: pathlib.Path
) -> None:
    """--server waitress: its pages, a 400 for another Host, pages within 0.5 s beside 40 stalled clients."""
    try:
        import waitress  # noqa: F401 - only whether it is there
    except ImportError:
        unavailable("waitress is not installed: pip install 'ilmek[web]'")
    process, first = start_web("--db", str(db), "--port", "0", "--server", "waitress", home=tmp_path)
    try:
        assert "server: waitress" in first, first
        url, port = url_of(first), port_of(first)
        status, page = fetch(url)
        assert (200, True) == (status, "order-1042" in page)
        assert 400 == send("127.0.0.1", port, "GET", "/", {"Host": f"evil.example:{port}"})[0]
        stop, reopened = threading.Event(), [0]
        attacker = threading.Thread(target=slowloris, args=(port, 40, stop, reopened))
        attacker.start()
        try:
            time.sleep(0.5)
            waits = []
            for _ in range(5):
                started = time.monotonic()
                assert 200 == fetch(url)[0]
                waits.append(time.monotonic() - started)
        finally:
            stop.set()
            attacker.join(10)
        assert max(waits) < 0.5, waits
    finally:
        out, err = stop_web(process)
    assert 0 == process.returncode, err
    assert "stopped" in out


def test_server_waitress_without_waitress_says_which_extra_to_install(
    tmp_path: pathlib.Path, db: pathlib.Path
) -> None:
    """Where waitress cannot be imported: exit 1 naming pip install 'ilmek[web]', no traceback."""
    hide = "import sys, runpy; sys.modules['waitress'] = None; sys.modules['waitress.server'] = None; "
    argv = ["ilmek", "web", "--db", str(db), "--port", "0", "--server", "waitress"]
    run = f"{hide}sys.argv = {argv!r}; runpy.run_module('ilmek', run_name='__main__')"
    done = subprocess.run(
        [sys.executable, "-c", run], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert 1 == done.returncode, done.stderr
    assert "pip install 'ilmek[web]'" in done.stderr
    assert "Traceback" not in done.stderr
