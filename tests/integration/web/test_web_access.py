"""Who reaches the console: its host names on every binding (DNS rebinding), and the login it asks for.

Real servers on real sockets: ``make_server`` in a background thread, or
``python -m ilmek web`` in a process of its own; requests go to 127.0.0.1
(or ::1) with a forged ``Host`` and ``Origin``, as a page that rebound its
own DNS name to this machine would send them.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
import socket
import subprocess
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import SqliteCheckpointer
from ilmek.web.serve import ConsoleServer, make_server
from tests.support.web_support import (
    THREADS,
    basic,
    graphs,
    populate,
    port_of,
    send,
    serving,
    start_web,
    stop_web,
)

pytestmark = pytest.mark.timeout(60)

EVIL = "evil.example"


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SqliteCheckpointer]:
    """The sample threads in a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path / "console.db")
    populate(checkpointer, hostile=False)
    yield checkpointer
    checkpointer.close()


@contextlib.contextmanager
def running(store: SqliteCheckpointer, host: str, **options: Any) -> Iterator[ConsoleServer]:
    """The sample console bound to ``host``, serving in a thread (a skip if this machine cannot bind it)."""
    entered = False
    try:
        with serving(store, graphs(), host=host, **options) as server:
            entered = True
            yield server
    except OSError as error:
        if entered:
            raise
        pytest.skip(f"cannot bind {host!r} here: {error}")


def web_beyond_loopback(tmp_path: pathlib.Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``ilmek web --host 0.0.0.0 --port 0 OPTIONS`` on an empty store; the process and its first line."""
    SqliteCheckpointer(tmp_path / "shop.db").close()
    return start_web(
        "--db", str(tmp_path / "shop.db"), "--host", "0.0.0.0", "--port", "0", *options, home=tmp_path
    )


def thread_path(thread_id: str) -> str:
    """The path and query of a thread's page."""
    return "/thread?" + urllib.parse.urlencode({"id": thread_id})


# --- host names: DNS rebinding ---------------------------------------------------------------------

# (binding, where a client connects to reach it, a Host the console must answer to)
BINDINGS = [
    pytest.param("0.0.0.0", "127.0.0.1", "127.0.0.1", id="0.0.0.0"),
    pytest.param("127.0.0.2", "127.0.0.2", "127.0.0.2", id="127.0.0.2"),
    pytest.param("127.1", "127.0.0.1", "127.0.0.1", id="127.1"),
    pytest.param("::ffff:127.0.0.1", "127.0.0.1", "127.0.0.1", id="v4-mapped"),
    pytest.param("0:0:0:0:0:0:0:1", "::1", "[::1]", id="::1-spelled-long"),
]


@pytest.mark.parametrize(("binding", "address", "own_name"), BINDINGS)
def test_every_binding_refuses_a_foreign_host_with_a_page_that_shows_nothing(
    store: SqliteCheckpointer, binding: str, address: str, own_name: str
) -> None:
    """Host evil.example:PORT: a plain 400 without data or tokens; the binding's own names: the page."""
    with running(store, binding) as server:
        port = server.server_port
        for target in ("/", thread_path(THREADS["waiting"]), "/static/console.css"):
            status, headers, body = send(address, port, "GET", target, {"Host": f"{EVIL}:{port}"})
            assert 400 == status
            assert headers["Content-Type"].startswith("text/plain")
            assert THREADS["waiting"] not in body
            assert "token" not in body
            assert "<" not in body
        for name in (f"{own_name}:{port}", f"localhost:{port}", "localhost"):
            status, _, body = send(address, port, "GET", thread_path(THREADS["waiting"]), {"Host": name})
            assert 200 == status, name
            assert "Charge 74.97 EUR?" in body


@pytest.mark.parametrize(("binding", "address", "own_name"), BINDINGS)
def test_a_rebinding_page_cannot_delete_a_thread(
    store: SqliteCheckpointer, binding: str, address: str, own_name: str
) -> None:
    """A valid form token POSTed with Host and Origin evil.example:PORT is refused; the thread stays."""
    thread = THREADS["stalled"]
    with running(store, binding, allow_actions=True) as server:
        port = server.server_port
        token = server.console.guard.token("delete", thread)
        target = "/action/delete?" + urllib.parse.urlencode({"id": thread})
        # Even with the login (which a rebinding page does not have), the Host is refused.
        login = getattr(server.console, "login", None)
        auth = {"Authorization": basic("x", login.token)} if login is not None else {}
        forged = {"Host": f"{EVIL}:{port}", "Origin": f"http://{EVIL}:{port}", **auth}
        status, _, _ = send(address, port, "POST", target, forged, f"token={token}&confirm=yes")
        assert 400 == status
        # An allowed Host but another origin: the Origin check refuses it.
        other = {"Host": f"{own_name}:{port}", "Origin": f"http://{EVIL}:{port}", **auth}
        status, _, _ = send(address, port, "POST", target, other, f"token={token}&confirm=yes")
        assert 403 == status
    assert store.get(thread) is not None


def test_allowed_host_names_more_and_a_malformed_one_is_refused(store: SqliteCheckpointer) -> None:
    """allowed_hosts adds console.example (any port); ports do not matter; "evil:x" is not a host name."""
    with running(store, "0.0.0.0", allowed_hosts=["Console.Example."]) as server:
        port = server.server_port
        assert 200 == send("127.0.0.1", port, "GET", "/", {"Host": f"console.example:{port}"})[0]
        assert 200 == send("127.0.0.1", port, "GET", "/", {"Host": "console.example"})[0]
        assert 400 == send("127.0.0.1", port, "GET", "/", {"Host": f"sub.console.example:{port}"})[0]
        assert 400 == send("127.0.0.1", port, "GET", "/", {})[0]
    with pytest.raises(ValueError, match="not a host name"):
        make_server(store, host="127.0.0.1", port=0, allowed_hosts=["evil:x"])


def test_ilmek_web_answers_to_allowed_host_and_nothing_else(tmp_path: pathlib.Path) -> None:
    """A real process on 0.0.0.0, --allowed-host console.example: it and 127.0.0.1 pass, evil is a 400."""
    process, first = web_beyond_loopback(tmp_path, "--allowed-host", "console.example")
    try:
        port = port_of(first)
        assert 200 == send("127.0.0.1", port, "GET", "/", {"Host": f"console.example:{port}"})[0]
        assert 200 == send("127.0.0.1", port, "GET", "/", {"Host": f"127.0.0.1:{port}"})[0]
        assert 400 == send("127.0.0.1", port, "GET", "/", {"Host": f"{EVIL}:{port}"})[0]
    finally:
        stop_web(process)
    assert 0 == process.returncode


# --- the login -----------------------------------------------------------------------------------


def test_a_console_beyond_this_machine_with_actions_asks_for_its_token(store: SqliteCheckpointer) -> None:
    """0.0.0.0 with actions: 401 without the token; Basic with any user and the token passes, not another."""
    with running(store, "0.0.0.0", allow_actions=True) as server:
        login = server.console.login
        assert login is not None
        port = server.server_port
        host = {"Host": f"127.0.0.1:{port}"}
        status, headers, body = send("127.0.0.1", port, "GET", thread_path(THREADS["waiting"]), host)
        assert 401 == status
        assert headers["WWW-Authenticate"].startswith("Basic ")
        assert THREADS["waiting"] not in body
        assert login.token not in body
        wrong = {**host, "Authorization": basic("ops", login.token[:-1] + "x")}
        assert 401 == send("127.0.0.1", port, "GET", "/", wrong)[0]
        right = {**host, "Authorization": basic("anyone", login.token)}
        status, _, body = send("127.0.0.1", port, "GET", thread_path(THREADS["waiting"]), right)
        assert 200 == status
        assert 'name="token"' in body
        assert login.token not in body
        # A POST without the login is refused before its form token is even looked at.
        form = f"token={server.console.guard.token('delete', THREADS['stalled'])}&confirm=yes"
        target = "/action/delete?" + urllib.parse.urlencode({"id": THREADS["stalled"]})
        assert 401 == send("127.0.0.1", port, "POST", target, host, form)[0]
    assert store.get(THREADS["stalled"]) is not None


def test_a_token_in_the_url_sets_a_strict_cookie_and_leaves_the_url(store: SqliteCheckpointer) -> None:
    """?token=: a 303 to the same page without it, setting an HttpOnly SameSite=Strict cookie that logs in."""
    with running(store, "0.0.0.0", allow_actions=True) as server:
        login = server.console.login
        assert login is not None
        port = server.server_port
        host = {"Host": f"127.0.0.1:{port}"}
        query = urllib.parse.urlencode({"status": "all", "token": login.token})
        status, headers, _ = send("127.0.0.1", port, "GET", f"/?{query}", host)
        assert 303 == status
        assert "/?status=all" == headers["Location"]
        cookie = headers["Set-Cookie"]
        assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {part.strip() for part in cookie.split(";")}
        assert login.token not in cookie
        pair = cookie.split(";", 1)[0]
        status, _, body = send("127.0.0.1", port, "GET", "/?status=all", {**host, "Cookie": pair})
        assert 200 == status
        assert THREADS["waiting"] in body
        assert login.token not in body
        assert 401 == send("127.0.0.1", port, "GET", "/?token=nope", host)[0]
        # Logged in already, a token in the URL is still taken out of it.
        status, headers, _ = send("127.0.0.1", port, "GET", "/?token=x&q=a", {**host, "Cookie": pair})
        assert (303, "/?q=a") == (status, headers["Location"])
        # One character of the cookie changed (to another one: "0" may already be its last).
        forged = pair[:-1] + ("1" if pair.endswith("0") else "0")
        assert 401 == send("127.0.0.1", port, "GET", "/", {**host, "Cookie": forged})[0]


def test_loopback_and_read_only_consoles_ask_for_no_login(store: SqliteCheckpointer) -> None:
    """127.0.0.1 with actions, and 0.0.0.0 read-only, serve without a login (as before)."""
    with running(store, "127.0.0.1", allow_actions=True) as server:
        assert server.console.login is None
        assert 200 == send("127.0.0.1", server.server_port, "GET", "/", {"Host": "localhost"})[0]
    with running(store, "0.0.0.0") as server:
        assert server.console.login is None
        assert 200 == send("127.0.0.1", server.server_port, "GET", "/", {"Host": "127.0.0.1"})[0]


def test_ilmek_web_prints_its_login_once_and_never_logs_it(tmp_path: pathlib.Path) -> None:
    """--host 0.0.0.0 --allow-actions: a line with the token, which logs in; the request log hides it."""
    process, first = web_beyond_loopback(tmp_path, "--allow-actions")
    try:
        assert process.stdout is not None
        second = process.stdout.readline()
        shape = r"login: open (http://\S+/)\?token=(\S+) once .* the password (\S+)$"
        found = re.match(shape, second.strip())
        assert found is not None, second
        token = found.group(2)
        assert token == found.group(3)
        assert len(token) >= 32
        port = port_of(first)
        host = {"Host": f"127.0.0.1:{port}"}
        assert 401 == send("127.0.0.1", port, "GET", "/", host)[0]
        assert 303 == send("127.0.0.1", port, "GET", f"/?token={token}", host)[0]
        assert 200 == send("127.0.0.1", port, "GET", "/", {**host, "Authorization": basic("me", token)})[0]
    finally:
        out, err = stop_web(process)
    assert 0 == process.returncode
    assert "GET /?token=" in err
    assert token not in err
    assert token not in out


def test_ilmek_web_insecure_no_login_serves_actions_without_one_and_says_so(tmp_path: pathlib.Path) -> None:
    """--insecure-no-login: no login line, a warning that anyone can act, the pages without credentials."""
    process, first = web_beyond_loopback(tmp_path, "--allow-actions", "--insecure-no-login")
    try:
        assert process.stdout is not None
        second = process.stdout.readline()
        assert second.startswith("warning: listening beyond this machine, with no login")
        assert "act on it" in second
        port = port_of(first)
        assert 200 == send("127.0.0.1", port, "GET", "/", {"Host": f"127.0.0.1:{port}"})[0]
    finally:
        stop_web(process)
    assert 0 == process.returncode


def test_ipv6_wildcard_binding_refuses_foreign_hosts_too(store: SqliteCheckpointer) -> None:
    """Bound to ::, reached over ::1: evil.example is a 400, [::1] is the page."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    with running(store, "::", allow_actions=True, insecure_no_login=True) as server:
        port = server.server_port
        assert 400 == send("::1", port, "GET", "/", {"Host": f"{EVIL}:{port}"})[0]
        assert 200 == send("::1", port, "GET", "/", {"Host": f"[::1]:{port}"})[0]
