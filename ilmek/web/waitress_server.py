"""Serving the console with waitress, a production WSGI server (``ilmek web --server waitress``).

waitress is an optional extra (``pip install 'ilmek[web]'``); the standard
library's server (:mod:`ilmek.web.serve`) stays the default, so ``ilmek web``
behaves the same on every machine whether or not waitress is installed. Pick
waitress for a console many people use at once, or one that must stay up
beside a busy network: it reads every request whole in one event loop
before one of its worker threads sees it, so a slow or half-sent request
holds a connection but never a worker.

The same limits as the standard library's server, in waitress's terms:
:data:`~ilmek.web.serve.MAX_CONNECTIONS` worker threads (requests worked on
at once), :data:`~ilmek.web.serve.MAX_WAITING` connections (more wait in the
kernel's listen queue), a connection that sends nothing for
:data:`~ilmek.web.serve.REQUEST_TIMEOUT` seconds closed (checked every
second), and a request body of at most 1 MiB. waitress logs no requests.
The host names, the login and everything else are the console's own, as
under the default server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..checkpoint.base import Checkpointer
from ..errors import InvalidArgumentError
from ..graph import CompiledGraph
from .access import Login
from .app import Console
from .serve import MAX_CONNECTIONS, MAX_WAITING, REQUEST_TIMEOUT, console_for, console_url

__all__ = ["WaitressConsole", "make_waitress_server"]

_MAX_BODY: Final = 1024 * 1024


class WaitressConsole:
    """The console served by waitress: where it listens, and its ``serve_forever``/``server_close``.

    Args:
        server: The waitress server (``waitress.create_server``), not yet serving.
        console: The console it serves.
    """

    def __init__(self, server: Any, console: Console) -> None:
        self._server = server
        self.console = console
        self.bound_host = str(server.effective_host)
        self.server_port = int(server.effective_port)

    @property
    def url(self) -> str:
        """The console's address, e.g. ``http://127.0.0.1:8765/``."""
        return console_url(self.bound_host, self.server_port)

    def serve_forever(self) -> None:
        """Serve until Ctrl-C, then raise ``KeyboardInterrupt`` as the standard library's server does."""
        # waitress ends its loop quietly on Ctrl-C (and only then, or when its sockets are closed).
        self._server.run()
        raise KeyboardInterrupt

    def server_close(self) -> None:
        """Close the listening socket and the connections."""
        self._server.close()


def _unset(environ: Any, start_response: Any) -> Any:
    """What waitress serves until the console is built (nothing: it does not serve yet)."""
    raise RuntimeError("the console is not ready")


def make_waitress_server(
    checkpointer: Checkpointer,
    graphs: CompiledGraph | Mapping[str, CompiledGraph] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_actions: bool = False,
    secret: bytes | str | None = None,
    allowed_hosts: Iterable[str] = (),
    login: Login | None = None,
    insecure_no_login: bool = False,
    answer_secret: bytes | str | None = None,
) -> WaitressConsole:
    """The console under waitress, bound to ``host:port`` (``0`` picks a free port), not yet serving.

    The arguments are :func:`ilmek.web.serve.make_server`'s.

    Raises:
        InvalidArgumentError: waitress is not installed.
        OSError: the address cannot be bound.
        ValueError: a name in ``allowed_hosts`` is not a host name.
    """
    try:
        import waitress.server
    except ImportError as error:
        raise InvalidArgumentError(
            "serving the console with waitress needs the waitress package: pip install 'ilmek[web]'"
        ) from error
    # The console's host names depend on the address bound, so the server is made first.
    server = waitress.server.create_server(
        _unset,
        host=host,
        port=port,
        threads=MAX_CONNECTIONS,
        connection_limit=MAX_WAITING,
        channel_timeout=int(REQUEST_TIMEOUT),
        cleanup_interval=1,
        max_request_body_size=_MAX_BODY,
        expose_tracebacks=False,
        ident="ilmek",
    )
    try:
        console = console_for(
            checkpointer,
            graphs,
            host=host,
            bound=str(server.effective_host),
            allow_actions=allow_actions,
            secret=secret,
            allowed_hosts=allowed_hosts,
            login=login,
            insecure_no_login=insecure_no_login,
            answer_secret=answer_secret,
        )
    except BaseException:
        server.close()
        raise
    server.application = console
    return WaitressConsole(server, console)
