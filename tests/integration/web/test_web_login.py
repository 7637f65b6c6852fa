"""The console's login over real sockets: where its redirect may go, what its log keeps, how long it lasts.

Also the origin check of its forms, which compares the scheme as well as the host.

A console served by ``make_server`` in a background thread with a login;
requests go to 127.0.0.1 with exactly the request target an attacker
would write (percent-encoded slashes and backslashes, tabs, double
encoding, an absolute URL), and the answer's ``Location`` must stay on the
console.
"""

from __future__ import annotations

import pathlib
import socket
import urllib.parse
from collections.abc import Iterator

import pytest

from ilmek import SqliteCheckpointer
from ilmek.web.access import COOKIE_LIFETIME, Login
from ilmek.web.app import Console
from ilmek.web.serve import ConsoleServer
from tests.support.web_support import Client, basic, send, serving

pytestmark = pytest.mark.timeout(60)

TOKEN = "the-console-login-token-0123456789"
EVIL = "evil.example"

# Request targets whose path, once decoded, starts with something a browser reads as another host.
ESCAPING_TARGETS = [
    pytest.param(f"/%2F{EVIL}/", id="encoded-slash"),
    pytest.param(f"/%2F%2F{EVIL}/", id="two-encoded-slashes"),
    pytest.param(f"/%2f{EVIL}/x?q=1", id="lower-case-escape"),
    pytest.param(f"//{EVIL}/", id="two-slashes"),
    pytest.param(f"/\\{EVIL}/", id="slash-backslash"),
    pytest.param(f"/%5C{EVIL}/", id="encoded-backslash"),
    pytest.param(f"/%5C%5C{EVIL}/", id="two-encoded-backslashes"),
    pytest.param(f"/%2F%5C{EVIL}/", id="slash-and-backslash-encoded"),
    pytest.param(f"/%09/{EVIL}/", id="tab-then-slash"),
    pytest.param(f"/%0A/{EVIL}/", id="newline-then-slash"),
    pytest.param(f"/%0D%0A/%2F{EVIL}/", id="crlf-then-slashes"),
    pytest.param(f"/%252F%252F{EVIL}/", id="double-encoded-slashes"),
    pytest.param(f"/%255C{EVIL}/", id="double-encoded-backslash"),
    pytest.param(f"http://{EVIL}/", id="absolute-url"),
    pytest.param(f"/https:%2F%2F{EVIL}/", id="scheme-in-path"),
    pytest.param(f"/%2F{EVIL}%2F%2E%2E/", id="dot-segments"),
]


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SqliteCheckpointer]:
    """An empty store in a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path / "console.db")
    yield checkpointer
    checkpointer.close()


@pytest.fixture
def server(store: SqliteCheckpointer) -> Iterator[ConsoleServer]:
    """The console with a login, served on 127.0.0.1 in a thread."""
    with serving(store, allow_actions=True, login=Login(TOKEN)) as running:
        yield running


def cookie_of(headers: dict[str, str]) -> str:
    """The ``name=value`` pair of a login's ``Set-Cookie``."""
    return headers["Set-Cookie"].split(";", 1)[0]


def assert_on_the_console(location: str, origin: str, base: str = "/") -> None:
    """A ``Location`` that a browser resolves to a page of the console at ``origin`` under ``base``."""
    assert location.startswith(base), location
    assert not location.startswith("//"), location
    assert not any(character in location for character in "\\\t\r\n "), location
    resolved = urllib.parse.urlsplit(urllib.parse.urljoin(origin, location))
    assert urllib.parse.urlsplit(origin).netloc == resolved.netloc, location
    assert resolved.path.startswith(base), location


@pytest.mark.parametrize("target", ESCAPING_TARGETS)
def test_the_login_redirect_stays_on_the_console_whatever_the_path(
    server: ConsoleServer, target: str
) -> None:
    """?token= with the real token, by Basic or by cookie: every 303 goes to a path of the console only."""
    port = server.server_port
    origin = f"http://127.0.0.1:{port}/"
    host = {"Host": f"127.0.0.1:{port}"}
    joiner = "&" if "?" in target else "?"
    status, headers, _ = send("127.0.0.1", port, "GET", f"{target}{joiner}token={TOKEN}", host)
    assert 303 == status
    assert_on_the_console(headers["Location"], origin)
    signed_in = [{"Authorization": basic("ops", TOKEN)}, {"Cookie": cookie_of(headers)}]
    for credentials in signed_in:
        status, headers, _ = send(
            "127.0.0.1", port, "GET", f"{target}{joiner}token=x", {**host, **credentials}
        )
        assert 303 == status
        assert_on_the_console(headers["Location"], origin)


def test_the_login_redirect_keeps_an_ordinary_page_and_its_query(server: ConsoleServer) -> None:
    """The redirect still goes back to the page asked for, with its query, only without the token."""
    port = server.server_port
    target = f"/thread?id=a%2Fb&token={TOKEN}&checkpoint=c1"
    status, headers, _ = send("127.0.0.1", port, "GET", target, {"Host": f"127.0.0.1:{port}"})
    assert (303, "/thread?id=a%2Fb&checkpoint=c1") == (status, headers["Location"])


def test_the_login_redirect_of_a_mounted_console_stays_under_its_mount(store: SqliteCheckpointer) -> None:
    """Mounted at /ops (SCRIPT_NAME), a ?token= login goes to /ops/..., never to another host."""
    client = Client(Console(store, allow_actions=True, login=Login(TOKEN)), script_name="/ops")
    for target in (f"/ops/%2F{EVIL}/", f"/ops//{EVIL}/", f"/ops/%5C{EVIL}/"):
        reply = client.get(f"{target}?token={TOKEN}")
        assert 303 == reply.status
        assert_on_the_console(reply.location, "http://127.0.0.1:8765/", "/ops/")


# A query parameter named for a secret, spelled every way a client may: each logs in or not, none is logged.
SECRET_QUERIES = [
    pytest.param("token={}", True, id="plain"),
    pytest.param("%74oken={}", True, id="first-letter-encoded"),
    pytest.param("tok%65n={}", True, id="inner-letter-encoded"),
    pytest.param("%74%6F%6B%65%6E={}", True, id="all-encoded"),
    pytest.param("%74%6f%6b%65%6e={}", True, id="all-encoded-lower"),
    pytest.param("status=all&tok%65n={}&q=x", True, id="among-others"),
    pytest.param("token={}&token={}", True, id="twice"),
    pytest.param("%2574oken={}", False, id="double-encoded-name"),
    pytest.param("TOKEN={}", False, id="upper-case"),
    pytest.param("q=x;token={}", False, id="semicolon"),
    pytest.param("answer_token={}", False, id="answer-link-token"),
    pytest.param("secret={}", False, id="secret"),
    pytest.param("password={}", False, id="password"),
    pytest.param("q=%26token%3D{}", False, id="encoded-separators"),
]


@pytest.mark.parametrize(("query", "logs_in"), SECRET_QUERIES)
def test_no_spelling_of_a_secret_in_the_query_reaches_the_request_log(
    server: ConsoleServer,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    query: str,
    logs_in: bool,
) -> None:
    """?%74oken=T, ?tok%65n=T...: the request log keeps the path and hides T, for every secret-ish name."""
    server.quiet = False
    port = server.server_port
    target = "/thread?id=order-1&" + query.replace("{}", TOKEN)
    status, _, _ = send("127.0.0.1", port, "GET", target, {"Host": f"127.0.0.1:{port}"})
    assert (303 if logs_in else 401) == status
    # A malformed request line carrying it too: the server's own error line must hide it as well.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(f"GET {target} HTTP/1.1 extra\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert b"Error code: 400" in connection.recv(4096)
    logged = capsys.readouterr().err + caplog.text
    assert "GET /thread?id=order-1&" in logged
    assert TOKEN not in logged
    assert TOKEN[:12] not in logged


def test_a_login_cookie_is_refused_twelve_hours_after_it_was_issued(store: SqliteCheckpointer) -> None:
    """The cookie works until 12 h after its login, then is a 401; a forged issue time is refused at once."""
    now = [2_000_000_000.0]
    with serving(store, allow_actions=True, login=Login(TOKEN, clock=lambda: now[0])) as running:
        port = running.server_port
        host = {"Host": f"127.0.0.1:{port}"}
        status, headers, _ = send("127.0.0.1", port, "GET", f"/?token={TOKEN}", host)
        assert 303 == status
        assert f"Max-Age={COOKIE_LIFETIME}" in headers["Set-Cookie"]
        cookie = cookie_of(headers)
        now[0] += COOKIE_LIFETIME - 1
        assert 200 == send("127.0.0.1", port, "GET", "/", {**host, "Cookie": cookie})[0]
        # The issue time moved on by hand, the signature kept: not the console's cookie.
        name, _, value = cookie.partition("=")
        issued, _, mac = value.partition(".")
        forged = f"{name}={int(issued) + 3600}.{mac}"
        assert 401 == send("127.0.0.1", port, "GET", "/", {**host, "Cookie": forged})[0]
        now[0] += 2
        assert 401 == send("127.0.0.1", port, "GET", "/", {**host, "Cookie": cookie})[0]
        # Logging in again gives a cookie for the next 12 hours.
        _, headers, _ = send("127.0.0.1", port, "GET", f"/?token={TOKEN}", host)
        assert 200 == send("127.0.0.1", port, "GET", "/", {**host, "Cookie": cookie_of(headers)})[0]


def test_a_form_posted_from_the_https_origin_of_the_same_host_is_refused(server: ConsoleServer) -> None:
    """The console on http://127.0.0.1:PORT: a POST whose Origin is https://127.0.0.1:PORT is a 403."""
    port = server.server_port
    host = {"Host": f"127.0.0.1:{port}", "Authorization": basic("ops", TOKEN)}
    form = f"token={server.console.guard.token('delete', 'order-1')}&confirm=yes"
    target = "/action/delete?id=order-1"
    for origin, expected in ((f"https://127.0.0.1:{port}", 403), (f"http://127.0.0.1:{port}", 303)):
        status, _, page = send("127.0.0.1", port, "POST", target, {**host, "Origin": origin}, form)
        assert expected == status, page[-500:]
