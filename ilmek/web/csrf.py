"""Cross-site request forgery: form tokens, signed notes, and the Origin check.

The console keeps no sessions, so a token is an HMAC of what the form does
(the action and the thread) and the hour it was drawn in, under a secret
the console holds: a page from another site cannot compute it, and a token
for "answer thread A" does not delete thread B. A token is good for the
hour it was made in and the next. POSTs must also come from the page's own
origin, its scheme and host, when the browser says where they come from
(``Origin``, else ``Referer``). The note the console shows after an action
is signed the same way, and for the same two hours: an old link shows its
page without it.

This protects a person who is allowed in from being tricked by another
site. Who is allowed in at all is decided before: by the host names and
the login of :mod:`ilmek.web.access` under ``ilmek web``, by your
application's login when the console is mounted in it (see the README).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["Guard", "same_origin"]

WINDOW_SECONDS: Final = 3600
"""How long one token window lasts; a token is accepted in its window and the next."""


class Guard:
    """Makes and checks tokens under one secret.

    Args:
        secret: Bytes or text; random when not given (tokens then die with
            the process: give the same secret to every process that serves
            the console behind one address).
        clock: Seconds since the epoch (for tests).
    """

    def __init__(self, secret: bytes | str | None = None, *, clock: Any = time.time) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)
        self._key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        if not self._key:
            raise ValueError("the console's secret must not be empty")
        self._clock = clock

    def _mac(self, *parts: str) -> str:
        message = "\0".join(parts).encode("utf-8", "surrogatepass")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _window(self) -> int:
        return int(self._clock() // WINDOW_SECONDS)

    def token(self, action: str, thread_id: str) -> str:
        """The token a form for ``action`` on ``thread_id`` carries."""
        return self._mac("action", action, thread_id, str(self._window()))

    def valid(self, token: str | None, action: str, thread_id: str) -> bool:
        """Whether ``token`` was made for this action and thread, this hour or the last."""
        # compare_digest refuses non-ASCII text; no token of ours has any.
        if not token or not token.isascii():
            return False
        window = self._window()
        # Both windows are always compared, so the time taken tells nothing.
        matches = [
            hmac.compare_digest(token, self._mac("action", action, thread_id, str(w)))
            for w in (window, window - 1)
        ]
        return any(matches)

    def sign(self, text: str) -> str:
        """A signature for a note the console shows after a redirect, good this hour and the next."""
        return self._mac("note", text, str(self._window()))

    def signed(self, text: str, signature: str | None) -> bool:
        """Whether ``signature`` is the console's for ``text``, made this hour or the last.

        A link cannot put words in the console's mouth, and an old link
        shows its page without the note.
        """
        if not signature or not signature.isascii():
            return False
        window = self._window()
        matches = [
            hmac.compare_digest(signature, self._mac("note", text, str(w))) for w in (window, window - 1)
        ]
        return any(matches)


def _origin(url: str) -> tuple[str, str] | None:
    """A URL's scheme and host (with its port), lower case; ``None`` when it has no host."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return None
    return (parts.scheme.lower(), parts.netloc.lower()) if parts.netloc else None


def same_origin(environ: Mapping[str, Any], trusted: Iterable[str] = ()) -> bool:
    """Whether a request's ``Origin`` (else ``Referer``) names the scheme and host it was sent to.

    The scheme is the request's own (``wsgi.url_scheme``): a page served
    over plain ``http://`` posting to an ``https://`` console is another
    origin. A request that carries neither header passes (old browsers,
    command-line clients); the token still guards it. ``trusted`` adds
    origins (``https://admin.example.com``) for a console behind a proxy
    that rewrites ``Host`` or ends TLS without telling the application.
    """
    host = str(environ.get("HTTP_HOST") or "").lower()
    scheme = str(environ.get("wsgi.url_scheme") or "http").lower()
    allowed = {(scheme, host)} if host else set()
    allowed.update(filter(None, (_origin(origin) for origin in trusted)))
    origin = environ.get("HTTP_ORIGIN")
    if origin:
        # "null": a sandboxed frame, a file:// page or a redirect chain; never ours.
        return _origin(str(origin)) in allowed
    referer = environ.get("HTTP_REFERER")
    if referer:
        return _origin(str(referer)) in allowed
    return True
