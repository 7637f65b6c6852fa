"""Serving the console with the standard library's ``wsgiref`` (``ilmek web``).

One thread per connection (a resume runs the graph inside its request, and
a slow one must not hold up the pages). A connection first waits for its
request's head (line and headers): :data:`HEAD_TIMEOUT` seconds at most,
however it trickles, with at most :data:`MAX_WAITING` connections waiting
so (further ones queue in the kernel). Only a request whose head arrived,
and whose form arrived within :data:`REQUEST_TIMEOUT`, takes one of the
:data:`MAX_CONNECTIONS` places where the console reads the store and runs
graphs; one the console answers from its headers alone (a foreign
``Host``, a missing login, the login's redirect) takes none. So clients
that send half a request hold no place of the console's, and none for
longer than the head's deadline.

127.0.0.1 unless told otherwise. On every binding the console answers only
to the host names it was started with (no DNS trick reaches it), and one
that listens beyond this machine with its actions on asks for the login
token it prints at start (:mod:`ilmek.web.access`). The request log escapes
what clients send and never shows a token, however it is spelled
(:mod:`ilmek.web.request_log`).
"""

from __future__ import annotations

import contextlib
import io
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any, Final, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from ..checkpoint.base import Checkpointer
from ..errors import InvalidArgumentError
from ..graph import CompiledGraph
from ..redact import printable
from .access import Login, is_loopback, served_names
from .app import Console
from .request_log import log_line

if TYPE_CHECKING:
    from .waitress_server import WaitressConsole

__all__ = [
    "HEAD_TIMEOUT",
    "MAX_CONNECTIONS",
    "MAX_WAITING",
    "REQUEST_TIMEOUT",
    "SERVERS",
    "ConsoleServer",
    "console_for",
    "console_url",
    "make_server",
    "serve",
]

HEAD_TIMEOUT: Final = 5.0
"""Seconds a client has to send its request line and headers, however slowly (at most the request's)."""
REQUEST_TIMEOUT: Final = 10.0
"""Seconds a client has to send its whole request (head and form), and for each write to it."""
MAX_CONNECTIONS: Final = 32
"""Requests the console works on at once (reading the store, running graphs); more wait for a place."""
MAX_WAITING: Final = 256
"""Connections whose request's head is still arriving; more wait in the kernel's listen queue."""
_MAX_FORM: Final = 1024 * 1024
"""A form up to this size is read whole before the request takes a place (a larger one is refused)."""


class _Deadline(io.RawIOBase):
    """A connection's reading side that fails once the request has taken too long, however it trickles."""

    def __init__(self, connection: socket.socket, seconds: float, write_seconds: float) -> None:
        super().__init__()
        self._connection = connection
        self._write_seconds = write_seconds
        self._started = time.monotonic()
        self._deadline = self._started + seconds

    def extend(self, seconds: float) -> None:
        """Move the deadline to ``seconds`` after the connection was accepted."""
        self._deadline = self._started + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._connection.settimeout(left)
        try:
            return self._connection.recv_into(buffer)
        finally:
            # Writes keep the whole timeout of their own.
            self._connection.settimeout(self._write_seconds)


class _Late(io.RawIOBase):
    """A form that did not arrive in time: reading it fails as the connection's reading did."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise TimeoutError("the form did not arrive in time")


class _ServerHandler(ServerHandler):
    # wsgiref's ServerHandler logs the request through the request handler it is given here.
    request_handler: WSGIRequestHandler


class _Handler(WSGIRequestHandler):
    server: ConsoleServer

    def setup(self) -> None:
        super().setup()
        # For writes; a timeout per recv alone would let a byte every few seconds keep the
        # connection forever, so reads are held to one deadline: the head's, then the request's.
        self.connection.settimeout(self.server.request_timeout)
        self.rfile.close()
        server = self.server
        head = min(server.head_timeout, server.request_timeout)
        self._deadline = _Deadline(self.connection, head, server.request_timeout)
        self.rfile = io.BufferedReader(self._deadline)

    def handle(self) -> None:
        try:
            self._handle_one()
        except TimeoutError:
            self.close_connection = True
            self.log_message("%s", "closed: the request did not arrive in time")
        except ConnectionError:
            self.close_connection = True

    def _handle_one(self) -> None:
        # wsgiref's handle(), with the head's deadline, the form read before a place is taken,
        # and a place taken only for the work.
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        self._deadline.extend(self.server.request_timeout)
        environ = self.get_environ()
        handler = _ServerHandler(
            self._form(environ), cast("IO[bytes]", self.wfile), self.get_stderr(), environ, multithread=False
        )
        handler.request_handler = self
        console = self.server.console
        if console.answers_from_headers(environ):
            handler.run(console)
            return
        with self.server.place():
            handler.run(console)

    def _form(self, environ: Mapping[str, Any]) -> io.BufferedIOBase:
        """The form, read whole now (within the deadline), or the connection for the app to refuse."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return self.rfile
        if not 0 < length <= _MAX_FORM:
            return self.rfile
        try:
            return io.BytesIO(self.rfile.read(length))
        except TimeoutError:
            # The console answers 408 when it reads it.
            return io.BufferedReader(_Late())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        if self.server.quiet:
            return
        sys.stderr.write(log_line(f"{self.address_string()} - {format % args}") + "\n")


class ConsoleServer(socketserver.ThreadingMixIn, WSGIServer):
    """A threaded ``wsgiref`` server; ``url`` is where it listens.

    Args:
        server_address: ``(host, port)``.
        handler: The request handler class.
        request_timeout: See :data:`REQUEST_TIMEOUT`.
        max_connections: See :data:`MAX_CONNECTIONS`.
        head_timeout: See :data:`HEAD_TIMEOUT`.
        max_waiting: See :data:`MAX_WAITING`.
    """

    daemon_threads = True
    allow_reuse_address = True
    # Connections beyond max_waiting wait here, in the kernel, until one is served or cut off.
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
        head_timeout: float = HEAD_TIMEOUT,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        if not (request_timeout > 0 and head_timeout > 0) or max_connections < 1 or max_waiting < 1:
            raise ValueError(
                "request_timeout and head_timeout must be positive, max_connections and max_waiting "
                "at least 1"
            )
        self.request_timeout = float(request_timeout)
        self.head_timeout = float(head_timeout)
        self.max_connections = max_connections
        self.max_waiting = max_waiting
        self._places = threading.BoundedSemaphore(max_connections)
        self._connections = threading.BoundedSemaphore(max_waiting)
        self._stopping = threading.Event()
        super().__init__(server_address, handler)

    @property
    def url(self) -> str:
        """The console's address, e.g. ``http://127.0.0.1:8765/``."""
        return console_url(self.bound_host, self.server_port)

    @property
    def bound_host(self) -> str:
        """The address the server's socket is bound to."""
        return str(self.server_address[0])

    def _wait_for(self, slots: threading.BoundedSemaphore) -> bool:
        """Take one of ``slots`` once one is free; ``False`` if the server stops first."""
        while not slots.acquire(timeout=0.1):
            if self._stopping.is_set():
                return False
        return True

    @contextlib.contextmanager
    def place(self) -> Iterator[None]:
        """One of the ``max_connections`` places where a request is worked on, held for the block.

        Raises:
            ConnectionAbortedError: the server stopped while the request waited.
        """
        if not self._wait_for(self._places):
            raise ConnectionAbortedError("the console is stopping")
        try:
            yield
        finally:
            self._places.release()

    def process_request(self, request: Any, client_address: Any) -> None:
        # Waiting here stops accepting: the next connections queue in the kernel
        # until a waiting one is served or cut off at its head's deadline.
        if not self._wait_for(self._connections):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:
            # The thread could not be started, so it will not free its slot. (Any other
            # exception, Ctrl-C above all, may come once it runs: then the thread frees it.)
            self._connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (from another thread), also while it waits for a free connection."""
        self._stopping.set()
        super().shutdown()

    def server_close(self) -> None:
        """Close the socket; the console's background runs stop at their next superstep boundary."""
        super().server_close()
        console = getattr(self, "console", None)
        if console is not None:
            console.close()


class _ConsoleServer6(ConsoleServer):
    address_family = socket.AF_INET6


def console_url(host: str, port: int) -> str:
    """The address of a console listening on ``host`` (an IPv6 address in brackets) and ``port``."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def console_for(
    checkpointer: Checkpointer,
    graphs: CompiledGraph | Mapping[str, CompiledGraph] | None,
    *,
    host: str,
    bound: str,
    allow_actions: bool,
    secret: bytes | str | None = None,
    allowed_hosts: Iterable[str] = (),
    login: Login | None = None,
    insecure_no_login: bool = False,
    answer_secret: bytes | str | None = None,
) -> Console:
    """The console a server bound to ``bound`` (asked for ``host``) serves, whichever server it is.

    It answers to the host names of :func:`ilmek.web.access.served_names`,
    and asks for a login (a random one unless ``login`` is given) when it
    listens beyond this machine with its actions on, unless
    ``insecure_no_login``.

    Raises:
        ValueError: a name in ``allowed_hosts`` is not a host name.
    """
    names = served_names(host, bound, allowed_hosts)
    if login is None and allow_actions and not insecure_no_login and not is_loopback(bound):
        login = Login()
    return Console(
        checkpointer,
        graphs,
        allow_actions=allow_actions,
        secret=secret,
        allowed_hosts=names,
        login=login,
        answer_secret=answer_secret,
    )


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
    head_timeout: float = HEAD_TIMEOUT,
    max_waiting: int = MAX_WAITING,
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
        max_connections: Requests worked on at once.
        head_timeout: Seconds a client has to send its request line and headers.
        max_waiting: Connections whose request's head may be arriving at once.
        answer_secret: Serve ``/answer/<token>`` for answer links signed with it.

    Raises:
        OSError: the address cannot be bound (in use, not this machine's).
        ValueError: a name in ``allowed_hosts`` is not a host name.
    """
    server_class = _ConsoleServer6 if ":" in host else ConsoleServer
    server = server_class(
        (host, port),
        _Handler,
        request_timeout=request_timeout,
        max_connections=max_connections,
        head_timeout=head_timeout,
        max_waiting=max_waiting,
    )
    try:
        server.quiet = quiet
        server.console = console_for(
            checkpointer,
            graphs,
            host=host,
            bound=server.bound_host,
            allow_actions=allow_actions,
            secret=secret,
            allowed_hosts=allowed_hosts,
            login=login,
            insecure_no_login=insecure_no_login,
            answer_secret=answer_secret,
        )
    except BaseException:
        server.server_close()
        raise
    server.set_app(server.console)
    return server


SERVERS: Final = ("wsgiref", "waitress")
"""The servers ``ilmek web --server`` offers: the standard library's (the default), or waitress."""


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
    server: str = "wsgiref",
    answer_secret: bytes | str | None = None,
) -> int:
    """Serve the console until Ctrl-C; print its URL (and its login, if it needs one) first. Returns 0.

    ``server``: ``"wsgiref"`` (:func:`make_server`) or ``"waitress"``
    (:func:`ilmek.web.waitress_server.make_waitress_server`, the ``web`` extra).

    Raises:
        OSError: the address cannot be bound.
        ValueError: a name in ``allowed_hosts`` is not a host name.
        InvalidArgumentError: ``server`` is unknown, or waitress is not installed.
    """
    out = out or sys.stdout
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "allow_actions": allow_actions,
        "allowed_hosts": allowed_hosts,
        "insecure_no_login": insecure_no_login,
        "answer_secret": answer_secret,
    }
    running: ConsoleServer | WaitressConsole
    if server == "waitress":
        # Imported here: only this server needs the extra.
        from .waitress_server import make_waitress_server

        running = make_waitress_server(checkpointer, graphs, **options)
    elif server == "wsgiref":
        running = make_server(checkpointer, graphs, **options)
    else:
        raise InvalidArgumentError(f"server must be one of {', '.join(SERVERS)}, got {server!r}")
    # Ctrl-C may come at any moment from here on: even mid-print it stops cleanly.
    try:
        _announce(running.console, running.url, running.bound_host, server, out)
        running.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=out, flush=True)
    finally:
        running.server_close()
    return 0


def _announce(console: Console, url: str, bound: str, server: str, out: IO[str]) -> None:
    """Print where the console listens, its login (once, nowhere else) or a warning if it has none."""
    mode = "actions on" if console.allow_actions else "read-only"
    names = ", ".join(sorted(console.graphs)) or "none"
    under = "" if server == "wsgiref" else f"; server: {server}"
    print(printable(f"ilmek web console on {url} ({mode}; graphs: {names}{under})"), file=out)
    login = console.login
    if login is not None:
        # The request log hides it too.
        print(
            f"login: open {url}?token={login.token} once (the browser keeps a cookie), "
            f"or sign in with any user name and the password {login.token}",
            file=out,
        )
    elif not is_loopback(bound):
        print(
            "warning: listening beyond this machine, with no login: anyone who can reach "
            "it can read every thread"
            + (" and act on it (--insecure-no-login)" if console.allow_actions else ""),
            file=out,
        )
    print("press Ctrl-C to stop", file=out, flush=True)
