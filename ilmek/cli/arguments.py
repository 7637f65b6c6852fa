"""The parser's shared parts: argument types and validators, and the options several commands take.

An argument that is refused ends as a usage error (exit status 2) whose
message quotes the word shortened, never whole.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import time
from collections.abc import Callable
from typing import Any, Final, NoReturn

import attrs

from .. import serde
from ..checkpoint.sqlite import DEFAULT_PATH
from .failures import _UsageError
from .output import _q, _shorten
from .stores import DATABASE_ENV, validate_prefix

_Handler = Callable[[argparse.Namespace], int]
"""What runs a command: it takes the parsed command line and returns the exit status."""

_THREAD_HELP = "the thread's id (any text; quote it for the shell)"


# The largest count an option takes; far above any real use, far below what
# SQLite's 64-bit integers and a Python list can hold.
_MAX_COUNT = 1_000_000_000
# An age an option takes (`--older-than 30d`): seconds per unit.
_AGE_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(?:[0-9]{1,12}[smhdw])+")
_AGE_PART = re.compile(r"([0-9]{1,12})([smhdw])")
# The oldest age taken: a century, beyond any retention and well inside what
# a datetime can hold.
_MAX_AGE = 100 * 366 * 86400
_MOMENT_HELP = (
    "an age, meaning that long ago (90s, 10m, 2h, 30d, 1w, 1d12h), or an ISO date or time "
    "(2024-05-01, 2024-05-01T12:00Z; UTC unless it names a zone)"
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised to :func:`main`, which prints it safely."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see: {self.prog} --help)")


def _table_prefix(text: str) -> str:
    try:
        return validate_prefix(text)
    except ValueError as error:
        # Its message ends with the whole prefix, which may be thousands of characters.
        raise argparse.ArgumentTypeError(str(error).replace(repr(text), _q(text))) from None


def _text(text: str) -> str:
    """An argument that is looked up or stored as text (a thread id, an answer)."""
    if re.search("[\ud800-\udfff]", text):
        # Undecodable bytes in argv arrive as lone surrogates: no store holds them.
        raise argparse.ArgumentTypeError(f"not valid text (bytes that are not UTF-8?): {_q(text)}")
    return text


def _database_argument(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "is empty: give a SQLite file path, a postgresql:// URL or host=... dbname=..."
        )
    return text


def _positive(text: str) -> int:
    digits = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", digits):
        raise argparse.ArgumentTypeError(f"not a whole number: {_q(text)}")
    if digits.startswith("-") and digits.strip("-0"):
        raise argparse.ArgumentTypeError(f"must be at least 1, got {_shorten(digits, 20)}")
    # Counted, not converted: int() of a 5,000-digit string is refused too.
    number = int(digits) if len(digits.lstrip("+0")) <= len(str(_MAX_COUNT)) else _MAX_COUNT + 1
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    if number > _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {_MAX_COUNT}, got {_shorten(digits, 20)}")
    return number


def _age_seconds(text: str) -> int | None:
    """The seconds an age (``90s``, ``10m``, ``1d12h``) spans; ``None`` when ``text`` is not one."""
    compact = re.sub(r"\s+", "", text).lower()
    if not _AGE.fullmatch(compact):
        return None
    seconds = sum(int(number) * _AGE_UNITS[unit] for number, unit in _AGE_PART.findall(compact))
    if seconds > _MAX_AGE:
        raise argparse.ArgumentTypeError(f"must be at most a century, got {_q(text)}")
    return seconds


def _duration(text: str) -> float:
    """A span of time as seconds: an age (``1s``, ``10m``), at least a second."""
    seconds = _age_seconds(text)
    if seconds is None or seconds < 1:
        raise argparse.ArgumentTypeError(f"not a span of time of at least 1s (1s, 10m, 2h): {_q(text)}")
    return float(seconds)


def _moment(text: str) -> float:
    """A point in time as epoch seconds: an age (``30d``: that long ago) or an ISO date or time.

    An ISO time without a zone is read as UTC, as every time the command line prints is.
    """
    seconds = _age_seconds(text)
    if seconds is not None:
        return time.time() - seconds
    try:
        moment = _dt.datetime.fromisoformat(text.strip())
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.UTC)
        return moment.timestamp()
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"not an age (10m, 2h, 30d) or an ISO date (2024-05-01, 2024-05-01T12:00Z): {_q(text)}"
        ) from None


def _past_moment(text: str) -> float:
    """:func:`_moment`, but not in the future: "older than tomorrow" would take every thread."""
    moment = _moment(text)
    if moment > time.time():
        raise argparse.ArgumentTypeError(f"is in the future: {_q(text)}")
    return moment


def _store_options(parser: argparse.ArgumentParser, *, default: Any) -> None:
    parser.add_argument(
        "--db",
        metavar="DATABASE",
        type=_database_argument,
        default=default,
        help=(
            "a SQLite file path, a postgresql:// URL or a libpq keyword string "
            f"(default: ${DATABASE_ENV}, else {DEFAULT_PATH})"
        ),
    )
    parser.add_argument(
        "--table-prefix",
        metavar="PREFIX",
        type=_table_prefix,
        default="ilmek" if default is None else default,
        help="the prefix of the store's tables (default: ilmek)",
    )
    parser.add_argument(
        "--keys-env",
        metavar="VAR",
        type=_text,
        default=None if default is None else default,
        help="the environment variable holding the store's keys (id:base64key,...; the first is "
        "current), for a store encrypted at rest; never give a key itself on the command line. "
        "Without it, sealed values show as sealed",
    )


def _json_option(parser: argparse.ArgumentParser, shape: str) -> None:
    """``--json``: one JSON document on stdout instead of text; ``shape`` says what its keys hold."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON document instead: {shape} (stored values in ilmek's JSON form, "
        "times in ISO 8601); errors stay one line on stderr",
    )


@attrs.frozen(kw_only=True)
class Subcommands:
    """The ``COMMAND`` sub-parsers that each command module adds its own command to.

    ``store``: the store options, which every command takes after its name too.
    """

    subparsers: argparse._SubParsersAction[_Parser]
    store: _Parser

    def add(
        self, name: str, handler: _Handler, summary: str, *, only_shows: bool = False
    ) -> argparse.ArgumentParser:
        """A new command ``name``, run by ``handler``; ``summary`` is its line in ``--help``.

        ``only_shows``: the command prints stored values and writes none, so a
        value of a class this process never registered prints as stored (an
        operator's CLI does not import the application).
        """
        sub = self.subparsers.add_parser(name, parents=[self.store], help=summary, description=summary)
        sub.set_defaults(handler=_showing(handler) if only_shows else handler)
        return sub


def _showing(handler: _Handler) -> _Handler:
    def showing(args: argparse.Namespace) -> int:
        with serde.showing_unregistered():
            return handler(args)

    return showing
