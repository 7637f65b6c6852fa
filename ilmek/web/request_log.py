"""What the console's request log writes: each request's line, with no secret a URL carried.

The log keeps the path and the query (an operator reading it needs to know
which thread a request was about), but the value of every query parameter
whose name is a secret's (``token``, an answer link's token, a password, a
signature...) reads ``…``. A client may spell a name any way the query
parser reads it, so names are decoded before they are compared
(``%74oken``, ``tok%65n``, ``+``), and again while the text still changes
(``%2574oken``), case ignored; an encoded separator (``%26token%3D``) is
a separator too. What is left is escaped for the terminal
(:func:`ilmek.redact.printable`).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

from ..redact import printable

__all__ = ["HIDDEN", "log_line", "secret_name"]

HIDDEN: Final = "…"
"""What a secret's value reads in the log."""

# A parameter inside a request line: a separator (?, &, ; or one of them percent-encoded,
# once or more), then the text up to the next separator, space or quote.
_SEPARATOR: Final = r"(?:[?&;]|%(?:25)*(?:3f|26|3b))"
_PARAMETER: Final = re.compile(rf"(?i)({_SEPARATOR})((?:(?!{_SEPARATOR})[^\s\"'])+)")
_EQUALS: Final = re.compile(r"(?i)=|%(?:25)*3d")
_SECRET: Final = re.compile(r"(?i)token|secret|passw|pwd|auth|credential|session|cookie|sig|api.?key")
_MAX_DECODINGS: Final = 4


def _decoded(text: str) -> str:
    """``text`` percent- and plus-decoded while that changes it (a few times at most)."""
    for _ in range(_MAX_DECODINGS):
        decoded = urllib.parse.unquote_plus(text)
        if decoded == text:
            break
        text = decoded
    return text


def secret_name(parameter: str) -> bool:
    """Whether a query parameter (``name=value`` as sent, perhaps percent-encoded) is named for a secret.

    Everything before its last ``=`` once decoded is taken for its name: a
    parser may read ``a%3Dtoken=T`` either way.
    """
    decoded = _decoded(parameter)
    return _SECRET.search(decoded[: decoded.rfind("=")]) is not None if "=" in decoded else False


def _hide(found: re.Match[str]) -> str:
    separator, parameter = found.group(1), found.group(2)
    equals = _EQUALS.search(parameter)
    if equals is None or not secret_name(parameter):
        return found.group(0)
    return separator + parameter[: equals.end()] + HIDDEN


# An answer link's path is its token (/answer/<token>).
_ANSWER_LINK: Final = re.compile(r"(/answer/)[^\s?#\"]*")


def log_line(text: str) -> str:
    """A line for the request log: every secret in a URL hidden (an answer link's token, the value of a
    secret-named parameter), then escaped for a terminal."""
    return printable(_PARAMETER.sub(_hide, _ANSWER_LINK.sub(rf"\1{HIDDEN}", text)))
