"""What the CLI prints, and how: lines, tables, times, JSON documents, error messages.

Everything printed that came from a store or from the command line goes
through these helpers (:func:`ilmek.redact.printable`, and on stderr
:func:`ilmek.redact.mask_secrets`), so stored text cannot drive the terminal
and no password is shown. How a stored value is drawn belongs to
:mod:`ilmek.cli.rendering`.
"""

from __future__ import annotations

import datetime as _dt
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from .. import serde
from ..redact import mask_secrets, printable, printable_json
from ..types import Pending

# Echoed arguments and whole error lines are cut here: a 5,000-character path
# helps nobody twice.
_MAX_ECHO = 200
_MAX_MESSAGE = 1000

# How much of a failure's message a `threads` row shows (`show` shows more).
_NOTE_TEXT = 80


# --- what may be printed ------------------------------------------------------------------


def _say(text: str = "") -> None:
    """Print a line, or a block the CLI laid out, to stdout.

    Its line breaks are kept, every other control character is escaped; so
    stored text must be escaped (:func:`printable`, :func:`render_value`,
    ``repr``) where it is put into the line, or a stored newline could forge
    a line of output.
    """
    print(printable(text, keep_newlines=True))


def _count(number: int, noun: str) -> str:
    """``1 thread``, ``12,345 threads``."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _shorten(text: str, limit: int = _MAX_ECHO) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _q(text: str) -> str:
    """A thread id, checkpoint id or other argument quoted for a message."""
    return repr(_shorten(text))


def _shell_word(text: str) -> str:
    """``text`` quoted for a shell; control characters as a bash ``$'...'`` escape, never raw."""
    if text.isprintable():
        return shlex.quote(text)
    body = []
    for char in text:
        if char in "\\'":
            body.append("\\" + char)
        elif char.isprintable():
            body.append(char)
        else:
            try:
                raw = char.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raw = char.encode("utf-8", "surrogatepass")
            body.extend(f"\\x{byte:02x}" for byte in raw)
    return "$'" + "".join(body) + "'"


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def _safe_message(message: str, secrets: Sequence[str]) -> str:
    """An error message as stderr may show it: one line, no password, no control character."""
    text = printable(mask_secrets(_one_line(message), secrets))
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "…"


def _complain(message: str, secrets: Sequence[str]) -> None:
    print(f"ilmek: {_safe_message(message, secrets)}", file=sys.stderr)


# --- tables and times ---------------------------------------------------------------------


def _when(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _align(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as lines, each column padded to its widest cell (the last is left ragged).

    Cells are escaped first: a cell may hold any stored text.
    """
    if not rows:
        return []
    cells = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in cells
    ]


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- JSON output --------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    """A stored value in ilmek's stored JSON form (:func:`ilmek.serde.to_jsonable`)."""
    return serde.to_jsonable(value, where="a value to print")


def _json_time(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).isoformat()


def _print_json(document: Any) -> None:
    """One JSON document on stdout; what could steer a terminal is a \\u escape, still valid JSON."""
    print(printable_json(json.dumps(document, ensure_ascii=False, indent=2)))


def _pending_json(pause: Pending) -> dict[str, Any]:
    return {
        "id": pause.id,
        "task_id": pause.task_id,
        "node": pause.node,
        "key": pause.key,
        "payload": _json_value(pause.payload),
        "kind": pause.kind,
        "answers": _json_value(pause.answers),
        "deadline": None if pause.deadline is None else _json_time(pause.deadline),
    }
