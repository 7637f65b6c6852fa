"""Who may reach the console: the host names it answers to, and the login it may ask for.

**Host names.** A page on another site can point a DNS name it owns at the
console's address (DNS rebinding) and then read the console as its own
origin; the browser still names that site in ``Host``. So a console served
by ``ilmek web`` answers only to the names it was started with
(:func:`served_names`), on every binding, and refuses any other ``Host``
with a plain 400 that shows nothing. Mounted in a host application, the
host application decides (``allowed_hosts=None``).

**Login.** A console that listens beyond this machine with its actions on
needs a login: a random token, printed once when it starts, given as the
password of HTTP Basic authentication (any user name) or once as
``?token=`` in a URL, which sets an ``HttpOnly``, ``SameSite=Strict``
cookie and sends the browser on to the same page without it
(:class:`Login`). Tokens are compared in constant time, and the token never
appears in a link the console writes or in its log.

**The cookie's lifetime.** The cookie holds the time it was issued and an
HMAC of that time under the token, never the token: it is refused
:data:`COOKIE_LIFETIME` (12 hours) after it was issued, or if it claims a
time to come, and the browser drops it then too (``Max-Age``). It is not
renewed while used: after 12 hours the person opens the ``?token=`` address
again (or signs in with Basic). Every login issues a new one, and a console
started again draws a new token (unless given one, ``Login(token)``), which
every cookie of the old one fails.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import ipaddress
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

__all__ = [
    "COOKIE",
    "COOKIE_LIFETIME",
    "Login",
    "basic_user",
    "host_allowed",
    "is_loopback",
    "normal_host",
    "served_names",
    "split_host",
]

COOKIE: Final = "ilmek_console_login"
"""The cookie a ``?token=`` login sets."""
COOKIE_LIFETIME: Final = 12 * 3600
"""Seconds a login cookie is accepted after it was issued."""
_CLOCK_SKEW: Final = 60
_ISSUED: Final = re.compile(r"[0-9]{1,12}\Z")

_NAME: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?\Z")
_HOST: Final = re.compile(r"(\[[0-9a-f:.]+\]|[^\[\]:/@\s]+)(?::([0-9]{1,5}))?\Z")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def normal_host(name: str) -> str | None:
    """A name as compared: lower case, no final dot, IPv6 compressed in brackets; ``None``: malformed."""
    name = name.strip().lower().removesuffix(".")
    address = _ip(name) if name.startswith("[") or ":" in name else None
    if address is not None:
        return f"[{address}]" if address.version == 6 else str(address)
    if name.startswith("[") or ":" in name:
        return None
    address = _ip(name)
    if address is not None:
        return str(address)
    return name if _NAME.match(name) else None


def split_host(header: str) -> tuple[str, int | None] | None:
    """A ``Host`` header as ``(name, port)`` (port ``None`` when not given), or ``None`` if malformed.

    A bare IPv6 address (``::1``, as a name is given, never as a browser sends it) is a name too.
    """
    if ":" in header and "[" not in header and _ip(header.strip()) is not None:
        bare = normal_host(header)
        return None if bare is None else (bare, None)
    found = _HOST.match(header.strip().lower())
    if found is None:
        return None
    name = normal_host(found.group(1))
    if name is None:
        return None
    port = int(found.group(2)) if found.group(2) is not None else None
    if port is not None and port > 65535:
        return None
    return name, port


def host_allowed(header: str, allowed: Iterable[str]) -> bool:
    """Whether a ``Host`` header names one of ``allowed``: a name (any port) or ``name:port`` (that port)."""
    request = split_host(header)
    if request is None:
        return False
    for entry in allowed:
        wanted = split_host(entry)
        if wanted is not None and wanted[0] == request[0] and wanted[1] in (None, request[1]):
            return True
    return False


def is_loopback(address: str) -> bool:
    """Whether an address (an IP literal, as a socket reports it) is this machine's loopback."""
    found = _ip(address)
    if found is None:
        return False
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        found = found.ipv4_mapped
    return found.is_loopback


def _forms(name: str) -> set[str]:
    """A name given to ``--host`` and the other spellings of the same address."""
    forms = set()
    shown = normal_host(name)
    if shown is not None:
        forms.add(shown)
    address = _ip(name.strip().lower())
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        # One socket serves both: a browser reaching 127.0.0.1 says so in Host.
        forms.add(str(address.ipv4_mapped))
    elif address is None and not name.startswith("["):
        # "127.1", "0x7f.0.0.1": IPv4 shorthand, which browsers rewrite in dotted form.
        with contextlib.suppress(OSError):
            forms.add(socket.inet_ntoa(socket.inet_aton(name.strip())))
    return forms


def served_names(host: str, bound_address: str, extra: Iterable[str] = ()) -> list[str]:
    """The host names ``ilmek web`` answers to, bound to ``host`` (the socket's ``bound_address``).

    ``localhost``, ``host`` as given and its other spellings, the address it
    bound, ``127.0.0.1`` and ``[::1]`` when that address is loopback or the
    wildcard (an IP literal cannot be rebound to another site), and ``extra``
    (``--allowed-host``), any port.

    Raises:
        ValueError: a name in ``extra`` is not a host name.
    """
    names = {"localhost", *_forms(host), *_forms(bound_address)}
    address = _ip(bound_address)
    if address is not None and (is_loopback(bound_address) or address.is_unspecified):
        names.update({"127.0.0.1", "[::1]"})
    for name in extra:
        parts = split_host(name)
        if parts is None:
            raise ValueError(f"not a host name: {name!r}")
        names.add(parts[0] if parts[1] is None else f"{parts[0]}:{parts[1]}")
    return sorted(names)


def _basic(environ: Mapping[str, Any]) -> tuple[str, str] | None:
    """The user name and password of a request's HTTP Basic credentials, if it carries any."""
    header = str(environ.get("HTTP_AUTHORIZATION") or "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, _, password = decoded.partition(":")
    return user, password


def basic_user(environ: Mapping[str, Any]) -> str | None:
    """The user name a request's HTTP Basic credentials give (``None`` when none or empty).

    Only who the person says they are: worth recording beside an action
    once the credentials were checked (:meth:`Login.authorized`), never a
    check itself.
    """
    found = _basic(environ)
    return found[0] if found is not None and found[0] else None


class Login:
    """The token a console asks for, and the checks of a request's credentials.

    Args:
        token: The secret; random (32 bytes, URL-safe) when not given.
        clock: Seconds since the epoch (for tests).
    """

    def __init__(self, token: str | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.token = token if token is not None else secrets.token_urlsafe(32)
        if not self.token or not self.token.isascii():
            raise ValueError("a login token is non-empty ASCII text")
        self._token = self.token.encode("ascii")
        self._clock = clock

    def _cookie_mac(self, issued: str) -> str:
        # Derived from the token, never the token itself.
        return hmac.new(self._token, b"ilmek console cookie\0" + issued.encode(), hashlib.sha256).hexdigest()

    def matches(self, offered: str | None) -> bool:
        """Whether ``offered`` is the token (in constant time)."""
        if not offered or not offered.isascii():
            return False
        return hmac.compare_digest(offered.encode("ascii"), self._token)

    def _cookie_valid(self, value: str) -> bool:
        issued, _, mac = value.partition(".")
        if not _ISSUED.match(issued) or not mac.isascii():
            return False
        age = self._clock() - int(issued)
        fresh = -_CLOCK_SKEW <= age <= COOKIE_LIFETIME
        return hmac.compare_digest(mac, self._cookie_mac(issued)) and fresh

    def authorized(self, environ: Mapping[str, Any]) -> bool:
        """Whether a request carries the token: HTTP Basic (any user name), or a login cookie still fresh."""
        basic = _basic(environ)
        if basic is not None and self.matches(basic[1]):
            return True
        for part in str(environ.get("HTTP_COOKIE") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and self._cookie_valid(value):
                return True
        return False

    def set_cookie(self, path: str) -> str:
        """The ``Set-Cookie`` a ``?token=`` login answers with: a new cookie, for the console's ``path``."""
        issued = str(int(self._clock()))
        value = f"{issued}.{self._cookie_mac(issued)}"
        return f"{COOKIE}={value}; Path={path or '/'}; Max-Age={COOKIE_LIFETIME}; HttpOnly; SameSite=Strict"
