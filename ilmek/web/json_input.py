"""JSON that a request sends (an answer, a metadata filter), parsed with its nesting bounded first.

The standard parser recurses once per level: a 4 kB answer nested a
thousand levels deep ends in ``RecursionError`` (a failed request and a
traceback in the log), far below any size limit. :func:`loads` counts the
levels first, in one linear scan that skips string literals, and refuses
anything deeper than :data:`MAX_DEPTH` with a ``ValueError`` whose message
a page can show.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_DEPTH", "TooDeepError", "depth", "loads"]

MAX_DEPTH: Final = 100
"""The deepest nesting of lists and objects accepted (an answer rarely needs five)."""

# A JSON string literal; its escapes may hide quotes and brackets.
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET: Final = re.compile(r"[\[\]{}]")


class TooDeepError(ValueError):
    """JSON nested deeper than :data:`MAX_DEPTH`, refused before parsing."""


def depth(text: str, stop_after: int = MAX_DEPTH) -> int:
    """How deep ``text``'s lists and objects nest (0 for a scalar); the count stops past ``stop_after``.

    Brackets inside string literals do not count. The text need not be
    valid JSON: an unclosed string or bracket only ever counts more.
    """
    level = deepest = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", text)):
        if bracket.group() in "[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > stop_after:
                    break
        elif level:
            level -= 1
    return deepest


def loads(text: str) -> Any:
    """``json.loads(text)``, refusing nesting deeper than :data:`MAX_DEPTH` before parsing.

    Raises:
        TooDeepError: it nests deeper (a ``ValueError``).
        ValueError: it is not JSON (``json.JSONDecodeError``).
    """
    if depth(text) > MAX_DEPTH:
        raise TooDeepError(f"it nests deeper than {MAX_DEPTH} levels")
    return json.loads(text)
