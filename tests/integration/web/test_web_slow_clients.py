"""Slow and stalled clients against the real server: they lose their connection, and cannot take them all.

Each test runs ``make_server`` on a free port of 127.0.0.1 with a short
``request_timeout``, holds connections open from raw sockets (half a request
line, a byte at a time, a form that never arrives) and checks that other
clients are served meanwhile, that the stalled ones are closed at the
deadline, and that no more than ``max_connections`` server threads exist.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import InMemoryCheckpointer
from ilmek.web.access import Login
from ilmek.web.serve import ConsoleServer
from tests.support.web_support import basic, fetch, send, serving

pytestmark = pytest.mark.timeout(60)


@contextlib.contextmanager
def running(**options: Any) -> Iterator[ConsoleServer]:
    """An empty store's console on a free port of 127.0.0.1, serving in a background thread."""
    with serving(InMemoryCheckpointer(), **options) as server:
        yield server


def stalled(port: int, sent: bytes) -> socket.socket:
    """A connection that sent ``sent`` and then nothing."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(sent)
    return connection


def closed_within(connection: socket.socket, seconds: float) -> float | None:
    """How long until the server closed ``connection`` (its response read and dropped), or None."""
    started = time.monotonic()
    connection.settimeout(seconds)
    try:
        while connection.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def serving_threads() -> int:
    """How many threads are serving a connection of some console server now."""
    return sum(1 for thread in threading.enumerate() if "process_request_thread" in thread.name)


def test_half_a_request_line_loses_its_connection_while_others_are_served() -> None:
    """A client that sent "GET /thr" and stopped is closed at the deadline; meanwhile pages are served."""
    with running(request_timeout=1.0) as server:
        with stalled(server.server_port, b"GET /thr") as connection:
            time.sleep(0.2)
            started = time.monotonic()
            assert 200 == fetch(server.url)[0]
            assert time.monotonic() - started < 0.9
            waited = closed_within(connection, 8)
        assert waited is not None, "the stalled connection was never closed"
        assert waited < 3


def test_a_request_sent_a_byte_at_a_time_is_cut_off_at_the_deadline() -> None:
    """One byte every 0.2 s keeps each read short, but the whole request has one deadline (1 s)."""
    with running(request_timeout=1.0) as server:
        connection = socket.create_connection(("127.0.0.1", server.server_port), timeout=10)
        with connection:
            started = time.monotonic()
            request = b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
            cut_off = None
            for byte in request:
                try:
                    connection.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    cut_off = time.monotonic() - started
                    break
                connection.settimeout(0.2)
                try:
                    if connection.recv(65536) == b"":
                        cut_off = time.monotonic() - started
                        break
                except TimeoutError:
                    pass
        assert cut_off is not None, "a trickling client kept its connection"
        assert cut_off < 4


def test_a_form_that_never_arrives_gets_a_408_and_nothing_logged_as_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A POST whose body stops halfway: 408 at the deadline, not a 500 with a traceback."""
    with running(request_timeout=1.0, allow_actions=True) as server:
        head = (
            b"POST /action/delete?id=x HTTP/1.0\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntoken="
        )
        with stalled(server.server_port, head) as connection:
            connection.settimeout(8)
            answer = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := connection.recv(65536):
                    answer += chunk
    assert answer.startswith(b"HTTP/1.0 408 "), answer[:80]
    assert [] == [record for record in caplog.records if record.name == "ilmek.web"]


def test_stalled_clients_take_at_most_max_waiting_threads_and_no_place_of_the_console() -> None:
    """Six stalled clients, max_waiting=4, max_connections=2: four threads wait on them, none has a place."""
    with running(request_timeout=1.0, max_connections=2, max_waiting=4) as server:
        before = serving_threads()
        connections = [stalled(server.server_port, b"GET / HT") for _ in range(6)]
        try:
            time.sleep(0.5)
            assert serving_threads() - before <= 4
            started = time.monotonic()
            status, _ = fetch(server.url)
            assert 200 == status
            # It waited in the kernel's queue for the stalled ones ahead of it, cut off at 1 s.
            assert time.monotonic() - started < 5
            assert serving_threads() - before <= 4
        finally:
            for connection in connections:
                connection.close()


SLOWLORIS_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Waiting: "


def slowloris(port: int, count: int, stop: threading.Event, reopened: list[int]) -> None:
    """Keep ``count`` connections that sent half a request's head open, reopening each as it drops."""
    connections = [stalled(port, SLOWLORIS_HEAD) for _ in range(count)]
    try:
        while not stop.wait(0.05):
            ready, _, _ = select.select(connections, [], [], 0)
            for connection in ready:
                # Readable: the server answered or closed it; drop it and send another.
                connection.close()
                connections[connections.index(connection)] = stalled(port, SLOWLORIS_HEAD)
                reopened[0] += 1
    finally:
        for connection in connections:
            connection.close()


def test_forty_half_sent_requests_reopened_as_they_drop_never_starve_the_console() -> None:
    """40 slowloris connections against 32 places, for 4 s: every page meanwhile answers within 0.5 s."""
    with running(request_timeout=1.5) as server:
        assert 40 > server.max_connections
        stop, reopened = threading.Event(), [0]
        attacker = threading.Thread(target=slowloris, args=(server.server_port, 40, stop, reopened))
        attacker.start()
        try:
            time.sleep(0.5)
            waits = []
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline:
                started = time.monotonic()
                assert 200 == fetch(server.url)[0]
                waits.append(time.monotonic() - started)
                time.sleep(0.2)
        finally:
            stop.set()
            attacker.join(10)
    assert reopened[0] >= 40, "the half-sent requests were never cut off and reopened"
    assert max(waits) < 0.5, waits


def test_a_foreign_host_and_a_missing_login_are_answered_while_every_place_is_taken() -> None:
    """With its one place held, the console still answers a foreign Host (400) and no login (401) at once."""
    login = Login("places-test-token")
    with running(max_connections=1, allow_actions=True, login=login) as server:
        port = server.server_port
        answered: list[int] = []
        with server.place():
            started = time.monotonic()
            assert 400 == send("127.0.0.1", port, "GET", "/", {"Host": f"evil.example:{port}"})[0]
            assert 401 == send("127.0.0.1", port, "GET", "/", {"Host": f"127.0.0.1:{port}"})[0]
            assert time.monotonic() - started < 2
            signed_in = {"Host": f"127.0.0.1:{port}", "Authorization": basic("ops", login.token)}
            waiting = threading.Thread(
                target=lambda: answered.append(send("127.0.0.1", port, "GET", "/", signed_in)[0])
            )
            waiting.start()
            time.sleep(0.5)
            # A page that reads the store waits for the place.
            assert [] == answered
        waiting.join(10)
        assert [200] == answered
