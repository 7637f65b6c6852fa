"""Serving the console with the standard library's ``wsgiref`` (``ilmek web``).

One thread per request (a resume runs the graph inside its request, and a
slow one must not hold up the pages), 127.0.0.1 unless told otherwise. On
every binding the console answers only to the host names it was started
with (no DNS trick reaches it), and one that listens beyond this machine
with its actions on asks for the login token it prints at start
(:mod:`ilmek.web.access`). The request log escapes what clients send
(:func:`ilmek.redact.printable`) and never shows a token.
"""

from __future__ import annotations

import re
import socket
import socketserver
import sys
from collections.abc import Iterable, Mapping
from typing import IO, Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..checkpoint.base import Checkpointer
from ..graph import CompiledGraph
from ..redact import printable
from .access import Login, is_loopback, served_names
from .app import Console

__all__ = ["ConsoleServer", "make_server", "serve"]

_TOKEN_IN_URL: Final = re.compile(r"(?i)([?&;]token=)[^&;\s]*")


class _Handler(WSGIRequestHandler):
    server: ConsoleServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        if self.server.quiet:
            return
        line = _TOKEN_IN_URL.sub(r"\1…", f"{self.address_string()} - {format % args}")
        sys.stderr.write(printable(line) + "\n")


class ConsoleServer(socketserver.ThreadingMixIn, WSGIServer):
    """A threaded ``wsgiref`` server; ``url`` is where it listens."""

    daemon_threads = True
    allow_reuse_address = True
    quiet = False
    console: Console

    @property
    def url(self) -> str:
        """The console's address, e.g. ``http://127.0.0.1:8765/``."""
        host = str(self.server_address[0])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.server_port}/"


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

    Raises:
        OSError: the address cannot be bound (in use, not this machine's).
        ValueError: a name in ``allowed_hosts`` is not a host name.
    """
    server_class = _ConsoleServer6 if ":" in host else ConsoleServer
    server = server_class((host, port), _Handler)
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
