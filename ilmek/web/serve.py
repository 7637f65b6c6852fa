"""Serving the console with the standard library's ``wsgiref`` (``ilmek web``).

One thread per request (a resume runs the graph inside its request, and a
slow one must not hold up the pages), 127.0.0.1 unless told otherwise.
Bound to a loopback address, the console answers only to the loopback host
names, so a web page elsewhere cannot reach it through a DNS trick. The
request log escapes what clients send (:func:`ilmek.redact.printable`).
"""

from __future__ import annotations

import socket
import socketserver
import sys
from collections.abc import Mapping
from typing import IO, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..checkpoint.base import Checkpointer
from ..graph import CompiledGraph
from ..redact import printable
from .app import Console

__all__ = ["ConsoleServer", "make_server", "serve"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _Handler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        if getattr(self.server, "quiet", False):
            return
        sys.stderr.write(printable(f"{self.address_string()} - {format % args}") + "\n")


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
) -> ConsoleServer:
    """A server bound to ``host:port`` (``0`` picks a free port), not yet serving.

    Call ``serve_forever()`` (in a thread, if you like) and ``shutdown()``;
    ``server_close()`` when done.

    Raises:
        OSError: the address cannot be bound (in use, not this machine's).
    """
    server_class = _ConsoleServer6 if ":" in host else ConsoleServer
    server = server_class((host, port), _Handler)
    server.quiet = quiet
    allowed = None
    if host in _LOOPBACK:
        bound = server.server_port
        allowed = [f"127.0.0.1:{bound}", f"localhost:{bound}", f"[::1]:{bound}"]
    server.console = Console(
        checkpointer, graphs, allow_actions=allow_actions, secret=secret, allowed_hosts=allowed
    )
    server.set_app(server.console)
    return server


def serve(
    checkpointer: Checkpointer,
    graphs: CompiledGraph | Mapping[str, CompiledGraph] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_actions: bool = False,
    out: IO[str] | None = None,
) -> int:
    """Serve the console until Ctrl-C; print its URL first. Returns 0.

    Raises:
        OSError: the address cannot be bound.
    """
    out = out or sys.stdout
    server = make_server(checkpointer, graphs, host=host, port=port, allow_actions=allow_actions)
    mode = "actions on" if allow_actions else "read-only"
    names = ", ".join(sorted(server.console.graphs)) or "none"
    # Ctrl-C may come at any moment from here on: even mid-print it stops cleanly.
    try:
        print(printable(f"ilmek web console on {server.url} ({mode}; graphs: {names})"), file=out)
        if host not in _LOOPBACK:
            print(
                "warning: listening beyond this machine, with no login: anyone who can reach "
                "it can read every thread" + (" and act on it" if allow_actions else ""),
                file=out,
            )
        print("press Ctrl-C to stop", file=out, flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=out, flush=True)
    finally:
        server.server_close()
    return 0
