"""A failure's traceback for an operator: what was raised first, then the user's own frames.

A stored traceback runs from ilmek's engine down to the user's node and
ends with the exception; an operator wants the end and the user's code.
The panel shows the exception's line, then the frames outside the ilmek
package (innermost last), and the whole traceback a fold away. Frames are
told apart by their file's path: inside the installed ``ilmek`` package or
not. Every text is escaped.
"""

from __future__ import annotations

import pathlib
import re
from typing import Final

from .html import Markup, escape, join, tag

__all__ = ["split_traceback", "traceback_block"]

_PACKAGE: Final = str(pathlib.Path(__file__).resolve().parents[1]) + "/"
_FRAME: Final = re.compile(r'^  File "(?P<path>[^"]*)", line \d+')


def split_traceback(text: str) -> tuple[list[str], int, str]:
    """The user's frames (each a ``File ...`` line and its source lines), how many are ilmek's, the last line.

    The last line is the traceback's last non-blank line: the exception's type and message.
    """
    lines = text.rstrip("\n").split("\n")
    frames: list[list[str]] = []
    for line in lines:
        if _FRAME.match(line):
            frames.append([line])
        elif frames and line.startswith("    "):
            frames[-1].append(line)
    user = []
    ours = 0
    for frame in frames:
        found = _FRAME.match(frame[0])
        path = found.group("path") if found is not None else ""
        if path.startswith(_PACKAGE):
            ours += 1
        else:
            user.append("\n".join(frame))
    last = next((line for line in reversed(lines) if line.strip()), "")
    return user, ours, last


def traceback_block(text: str) -> Markup:
    """The exception's line, the user's frames, and the whole traceback folded."""
    user, ours, last = split_traceback(text)
    frames = len(user) + ours
    return join(
        tag("p", {"class": "trace-last"}, tag("code", {}, last)),
        tag("h4", {}, "In your code (innermost last)") if user else None,
        tag(
            "pre",
            {"class": "message trace-user", "tabindex": "0"},
            escape("\n".join(user), keep_newlines=True),
        )
        if user
        else tag("p", {"class": "hint"}, "No frame outside ilmek: it was raised inside ilmek itself."),
        tag(
            "details",
            {"class": "fold whole-trace"},
            tag("summary", {}, f"The whole traceback ({frames} frames, {ours} inside ilmek)"),
            # Focusable: a long traceback scrolls, by keyboard too.
            tag("pre", {"class": "message trace", "tabindex": "0"}, escape(text, keep_newlines=True)),
        ),
    )
