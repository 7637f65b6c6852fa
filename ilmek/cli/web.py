"""The ``web`` command: serves the web console of :mod:`ilmek.web` until Ctrl-C."""

from __future__ import annotations

import argparse
import os

from .arguments import Subcommands, _text
from .failures import _CommandFailed
from .output import _q
from .stores import _opened


def _cmd_web(args: argparse.Namespace) -> int:
    """Serve the web console until Ctrl-C (``ilmek web``)."""
    # Imported here: the other commands never load the console or the user's graphs.
    from ..errors import InvalidArgumentError
    from ..loading import load_graphs
    from ..web.serve import MAX_CONNECTIONS, serve

    if not 0 <= args.port <= 65535:
        raise _CommandFailed(f"--port must be between 0 and 65535, got {args.port}")
    graphs = load_graphs(args.graph)
    answer_secret = None
    if args.answer_secret_env is not None:
        answer_secret = os.environ.get(args.answer_secret_env)
        if not answer_secret:
            raise _CommandFailed(
                f"--answer-secret-env names {_q(args.answer_secret_env)}, which is not set or empty: "
                "export the answer links' secret in it"
            )
    # Read-only, it opens a SQLite file so that nothing can be written (nor created or migrated);
    # on Postgres a pool of its own replaces a connection the server dropped, one per connection served.
    writes = args.allow_actions or answer_secret is not None
    with _opened(args, read_only=not writes, pool_size=MAX_CONNECTIONS) as checkpointer:
        try:
            return serve(
                checkpointer,
                graphs,
                host=args.host,
                port=args.port,
                allow_actions=args.allow_actions,
                allowed_hosts=args.allowed_host,
                insecure_no_login=args.insecure_no_login,
                server=args.server,
                answer_secret=answer_secret,
            )
        except InvalidArgumentError as error:
            raise _CommandFailed(str(error)) from error
        except OSError as error:
            raise _CommandFailed(
                f"cannot listen on {_q(args.host)} port {args.port}: {error.strerror or error}"
            ) from error


def _host_name(text: str) -> str:
    """A name the console answers to (``--allowed-host``): a host name or an IP literal, perhaps a port."""
    # Imported here: only `web` loads the console (and only when it is given this option).
    from ..web.access import split_host

    if split_host(_text(text)) is None:
        raise argparse.ArgumentTypeError(f"not a host name: {_q(text)}")
    return text


def add_web_parser(commands: Subcommands) -> None:
    """Add ``web``, which serves the web console, to the commands."""
    web = commands.add(
        "web",
        _cmd_web,
        "Serve the web console: the threads waiting for an answer, each thread's checkpoint tree, "
        "state, journals and graph; with --allow-actions, answer, fork, cancel, recover and delete.",
    )
    web.add_argument(
        "--graph",
        action="append",
        default=[],
        type=_text,
        metavar="MODULE:GRAPH",
        help="a graph to draw and to answer its threads with (repeatable), e.g. myapp.flows:checkout",
    )
    web.add_argument(
        "--host", type=_text, default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    web.add_argument("--port", type=int, default=8765, help="the port (default: 8765; 0 picks a free one)")
    web.add_argument(
        "--allow-actions",
        action="store_true",
        help="show the forms that answer, cancel, recover and delete (beyond 127.0.0.1 they need the "
        "login token printed at start)",
    )
    web.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        type=_host_name,
        metavar="NAME",
        help="another host name the console answers to (repeatable), e.g. console.example.com; it "
        "answers to --host, its other spellings and localhost, and refuses any other Host (DNS rebinding)",
    )
    web.add_argument(
        "--server",
        choices=("wsgiref", "waitress"),
        default="wsgiref",
        help="the WSGI server: the standard library's (default), or waitress, for many users at once "
        "(pip install 'ilmek[web]')",
    )
    web.add_argument(
        "--answer-secret-env",
        type=_text,
        metavar="VAR",
        help="serve /answer/<token> for answer links (ilmek.answer_token) signed with the secret in the "
        "environment variable VAR; such a page answers its one pause with no login",
    )
    web.add_argument(
        "--insecure-no-login",
        action="store_true",
        help="listening beyond 127.0.0.1 with --allow-actions, ask for no login: anyone who can reach "
        "the console can act on every thread",
    )
