"""Serving the console with the standard library's ``wsgiref`` (``ilmek web``).

One thread per connection (a resume runs the graph inside its request, and
a slow one must not hold up the pages), at most ``max_connections`` at once
(further ones wait in the listen queue), and a client has
``request_timeout`` seconds to send its whole request: one that sends half
a request line, or a byte now and then, loses its connection and its
thread. 127.0.0.1 unless told otherwise. On every binding the console
answers only to the host names it was started with (no DNS trick reaches
it), and one that listens beyond this machine with its actions on asks for
the login token it prints at start (:mod:`ilmek.web.access`). The request
log escapes what clients send (:func:`ilmek.redact.printable`) and never
shows a token.
"""

from __future__ import annotations

import io
import re
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..checkpoint.base import Checkpointer
from ..graph import CompiledGraph
from ..redact import printable
from .access import Login, is_loopback, served_names
from .app import Console

__all__ = ["MAX_CONNECTIONS", "REQUEST_TIMEOUT", "ConsoleServer", "make_server", "serve"]

REQUEST_TIMEOUT: Final = 10.0
"""Seconds a client has to send its whole request (line, headers and form), and for each write to it."""
MAX_CONNECTIONS: Final = 32
"""Connections served at once; more wait for one to end."""

_TOKEN_IN_URL: Final = re.compile(r"(?i)([?&;]token=)[^&;\s]*")
_ANSWER_LINK: Final = re.compile(r"(/answer/)[^\s?#\"]*")


class _Deadline(io.RawIOBase):
    """A connection's reading side that fails once the request has taken too long, however it trickles."""

    def __init__(self, connection: socket.socket, seconds: float) -> None:
        super().__init__()
        self._connection = connection
        self._seconds = seconds
        self._deadline = time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._connection.settimeout(min(left, self._seconds))
        try:
            return self._connection.recv_into(buffer)
        finally:
            # Writes keep the whole timeout of their own.
            self._connection.settimeout(self._seconds)


class _Handler(WSGIRequestHandler):
    server: ConsoleServer

    def setup(self) -> None:
        super().setup()
        seconds = self.server.request_timeout
        # For writes; a timeout per recv alone would let a byte every few seconds keep the
        # connection forever, so reads are held to one deadline for the whole request.
        self.connection.settimeout(seconds)
        self.rfile.close()
        self.rfile = io.BufferedReader(_Deadline(self.connection, seconds))

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:
            self.close_connection = True
            self.log_message("%s", "closed: the request did not arrive in time")
        except ConnectionError:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        if self.server.quiet:
            return
        line = _TOKEN_IN_URL.sub(r"\1…", f"{self.address_string()} - {format % args}")
        line = _ANSWER_LINK.sub(r"\1…", line)  # an answer link's path is its token
        sys.stderr.write(printable(line) + "\n")


class ConsoleServer(socketserver.ThreadingMixIn, WSGIServer):
    """A threaded ``wsgiref`` server; ``url`` is where it listens.

    Args:
        server_address: ``(host, port)``.
        handler: The request handler class.
        request_timeout: See :data:`REQUEST_TIMEOUT`.
        max_connections: See :data:`MAX_CONNECTIONS`.
    """

    daemon_threads = True
    allow_reuse_address = True
    # Connections beyond max_connections wait here, in the kernel, until one ends.
    request_queue_size = 128
    quiet = False
    console: Console

    def __init__(
        self,
        server_address: tuple[str, int],
        handler: type[WSGIRequestHandler],
        *,
        request_timeout: float = REQUEST_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if not request_timeout > 0 or max_connections < 1:
            raise ValueError("request_timeout must be positive and max_connections at least 1")
        self.request_timeout = float(request_timeout)
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._stopping = threading.Event()
        super().__init__(server_address, handler)

    @property
    def url(self) -> str:
        """The console's address, e.g. ``http://127.0.0.1:8765/``."""
        host = str(self.server_address[0])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.server_port}/"

    def process_request(self, request: Any, client_address: Any) -> None:
        # Waiting here stops accepting: the next connections queue in the kernel
        # until a served one ends (a stalled one ends at its deadline).
        while not self._slots.acquire(timeout=0.1):
            if self._stopping.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except RuntimeError:
            # The thread could not be started, so it will not free its slot. (Any other
            # exception, Ctrl-C above all, may come once it runs: then the thread frees it.)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (from another thread), also while it waits for a free connection."""
        self._stopping.set()
        super().shutdown()


class _ConsoleServer6(ConsoleServer):
    address_family = socket.AF_INET6


def make_server(
    checkpointer: Checkpointer,
    graphs: CompiledGraph | Mapping[str, CompiledGraph] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_actions: bool = False,
    secret: bytes | str | None = None,
    quiet: bool = False,
    allowed_hosts: Iterable[str] = (),
    login: Login | None = None,
    insecure_no_login: bool = False,
    request_timeout: float = REQUEST_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    answer_secret: bytes | str | None = None,
) -> ConsoleServer:
    """A server bound to ``host:port`` (``0`` picks a free port), not yet serving.

    Call ``serve_forever()`` (in a thread, if you like) and ``shutdown()``;
    ``server_close()`` when done.

    Args:
        checkpointer: The store to show.
        graphs: The graphs to draw and answer with (see :func:`ilmek.web.app`).
        host: The address to listen on.
        port: The port.
        allow_actions: Show and accept the forms that change threads.
        secret: The key of the form tokens (random when not given).
        quiet: Log no requests.
        allowed_hosts: More host names the console answers to, besides
            ``host``, its other spellings and ``localhost``
            (:func:`ilmek.web.access.served_names`).
        login: The login to ask for; when not given, a random one
            (``server.console.login.token``) if the console listens beyond
            this machine with its actions on, else none.
        insecure_no_login: Ask for no login even then.
        request_timeout: Seconds a client has to send its request.
        max_connections: Connections served at once.
        answer_secret: Serve ``/answer/<token>`` for answer links signed with it.

    Raises:
        OSError: the address cannot be bound (in use, not this machine's).
        ValueError: a name in ``allowed_hosts`` is not a host name.
    """
    server_class = _ConsoleServer6 if ":" in host else ConsoleServer
    server = server_class(
        (host, port), _Handler, request_timeout=request_timeout, max_connections=max_connections
    )
    try:
        bound = str(server.server_address[0])
        names = served_names(host, bound, allowed_hosts)
        if login is None and allow_actions and not insecure_no_login and not is_loopback(bound):
            login = Login()
        server.quiet = quiet
        server.console = Console(
            checkpointer,
            graphs,
            allow_actions=allow_actions,
            secret=secret,
            allowed_hosts=names,
            login=login,
            answer_secret=answer_secret,
        )
    except BaseException:
        server.server_close()
        raise
    server.set_app(server.console)
    return server


def serve(
    checkpointer: Checkpointer,
    graphs: CompiledGraph | Mapping[str, CompiledGraph] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_actions: bool = False,
    allowed_hosts: Iterable[str] = (),
    insecure_no_login: bool = False,
    out: IO[str] | None = None,
    answer_secret: bytes | str | None = None,
) -> int:
    """Serve the console until Ctrl-C; print its URL (and its login, if it needs one) first. Returns 0.

    Raises:
        OSError: the address cannot be bound.
        ValueError: a name in ``allowed_hosts`` is not a host name.
    """
    out = out or sys.stdout
    server = make_server(
        checkpointer,
        graphs,
        host=host,
        port=port,
        allow_actions=allow_actions,
        allowed_hosts=allowed_hosts,
        insecure_no_login=insecure_no_login,
        answer_secret=answer_secret,
    )
    mode = "actions on" if allow_actions else "read-only"
    names = ", ".join(sorted(server.console.graphs)) or "none"
    login = server.console.login
    exposed = not is_loopback(str(server.server_address[0]))
    # Ctrl-C may come at any moment from here on: even mid-print it stops cleanly.
    try:
        print(printable(f"ilmek web console on {server.url} ({mode}; graphs: {names})"), file=out)
        if login is not None:
            # Printed here once, and nowhere else: the request log hides it too.
            print(
                f"login: open {server.url}?token={login.token} once (the browser keeps a cookie), "
                f"or sign in with any user name and the password {login.token}",
                file=out,
            )
        elif exposed:
            print(
                "warning: listening beyond this machine, with no login: anyone who can reach "
                "it can read every thread"
                + (" and act on it (--insecure-no-login)" if allow_actions else ""),
                file=out,
            )
        print("press Ctrl-C to stop", file=out, flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=out, flush=True)
    finally:
        server.server_close()
    return 0
