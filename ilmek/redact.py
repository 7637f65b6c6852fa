"""Making text safe to show: no terminal control sequences, no passwords.

Two jobs, both about what reaches a person's screen or a log:

* :func:`printable` escapes every character that could steer a terminal or
  disguise text (C0 and C1 controls, DEL, bidirectional overrides, zero-width
  and other format characters, line separators, lone surrogates), so a stored
  value can never set a window title, move the cursor or clear the screen.
* :func:`mask_dsn` and :func:`mask_secrets` replace passwords in connection
  strings, and in free text such as a driver's error message, with ``***``.
  :func:`dsn_secrets` and :func:`connection_secrets` say which passwords a
  DSN (or a pool's options) carries, so that every piece of one a driver
  quotes back is masked too: the one path every DSN ilmek sees goes through.

Escapes are for reading, not a reversible encoding: a backslash in the text
is left as it is, so ``a\\x1bb`` may have been an escape character or those
four characters. Nothing here touches a database or the terminal itself.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "MASK",
    "connection_secrets",
    "dsn_secrets",
    "mask_dsn",
    "mask_secrets",
    "printable",
    "printable_json",
]

MASK: Final = "***"
"""What a password is replaced by."""

# Unicode categories that never belong on a screen as they are: Cc (C0, DEL,
# C1), Cf (bidirectional overrides and isolates, zero-width characters, soft
# hyphen...), Cs (lone surrogates, e.g. undecodable bytes in argv), Zl and Zp
# (line and paragraph separators, which some terminals and editors break lines
# on) and Cn (unassigned today, perhaps a control tomorrow). Private-use
# characters and the many space characters are left alone: they move nothing.
_UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"})
# The escapes Python's repr uses for the three most common controls.
_SHORT_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

# Keys whose values are secrets: libpq's password and sslpassword, and the
# spellings other tools put in their messages (passwd, pwd, client_secret...).
_SECRET_KEY: Final = r"[A-Za-z_]*(?:password|passwd|pwd|secret)[A-Za-z_]*"
_SECRET_KEY_RE: Final = re.compile(_SECRET_KEY + r"\Z", re.IGNORECASE)

# `scheme://user:password@`: libpq ends the password at the first `@`,
# Python's urlsplit at the last one before the path; mask up to the last `@`
# on the line, so a password holding `@`, `/`, `?` or spaces stays hidden under
# either reading (at worst a host is hidden too).
_URL_START: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A scheme starts where a word does: tried at every letter, a long run of
# letters would cost time quadratic in its length.
_SCHEME: Final = r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://"
# `scheme://user:`, where a password may follow; where it ends is found by
# _userinfo() below, not by a regex, whose backtracking to the last `@` would
# take quadratic time on a line of many URLs and no `@`.
_SCHEME_USER: Final = re.compile(rf"{_SCHEME}[^\s:/?#@]*:")
# In free text a URL ends at white space; in a DSN of its own, at a line end.
_TEXT_SPAN: Final = re.compile(r"\S+")
_DSN_SPAN: Final = re.compile(r"[^\n]+")
# A query parameter; its key may be percent-encoded (libpq decodes keys too).
_DSN_QUERY_PARAM: Final = re.compile(r"([?&][^=&#?\n]*=)([^&#\n]*)")
# In free text a value also ends at a quote: a message may quote the whole URL.
# A value already masked is left alone, so that masking twice keeps the
# punctuation after it ("password=***: connection refused").
_MASKED: Final = r"(?!\*\*\*)"
_TEXT_QUERY_PARAM: Final = re.compile(rf"([?&][^=&#?\s'\"]*=){_MASKED}([^&#\s'\"]*)")

# A libpq keyword value: single-quoted with backslash escapes (an unterminated
# quote runs to the end), or unquoted up to white space, backslash escaping
# the next character. In a DSN of its own an unquoted password also takes the
# words after it that are not `key=`: `password=my secret host=h` means "my
# secret" to the person who typed it, though libpq would stop at "my".
_QUOTED: Final = r"'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?"
_WORD: Final = r"(?:[^\s'\"\\]|\\.)(?:[^\s\\]|\\.)*"
_DSN_KEYWORD: Final = re.compile(
    rf"(\b{_SECRET_KEY}\s*=\s*)(?:{_QUOTED}|{_WORD}(?:\s+(?![A-Za-z_][A-Za-z0-9_]*\s*=){_WORD})*)",
    re.IGNORECASE,
)
_TEXT_KEYWORD: Final = re.compile(rf"(\b{_SECRET_KEY}\s*=\s*){_MASKED}(?:{_QUOTED}|[^\s'\"]+)", re.IGNORECASE)
# `'password': 'x'` and `"password": "x"`: a mapping's repr, or JSON.
_MAPPING_ENTRY: Final = re.compile(
    rf"""((['"]){_SECRET_KEY}\2\s*:\s*){_MASKED}(?:{_QUOTED}|[^\s,}}]+)""", re.IGNORECASE
)
# A fragment a driver quotes back from a connection string it could not
# parse: `missing "=" after "secret"`, `invalid integer value "pa" ...`.
_QUOTED_FRAGMENT: Final = re.compile(r"\"([^\"\n]+)\"|'([^'\n]+)'")
_BACKSLASH_ESCAPE: Final = re.compile(r"\\(.)")
# White space as libpq's isspace() sees it in the C locale.
_LIBPQ_SPACE: Final = " \t\n\r\f\v"
# Shorter known secrets are masked only where quoted: masking every "ab" in a
# message would hide ordinary words and still say little an attacker lacks.
_MIN_BARE_SECRET: Final = 4


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every character that could steer a terminal shown as an escape.

    Control characters become ``\\xHH`` (C0 such as ESC and BEL; LF, CR and TAB
    as ``\\n``, ``\\r`` and ``\\t``;
    DEL; C1 such as CSI ``\\x9b``), other unsafe characters ``\\uHHHH`` or
    ``\\UHHHHHHHH`` (bidirectional overrides and isolates such as ``\\u202e``,
    zero-width and other format characters, line and paragraph separators,
    unassigned code points, lone surrogates). Everything else, including
    backslashes and every printable script and emoji, is unchanged, and text
    that needs no escape is returned as it is. Already escaped text stays the
    same (the function is idempotent).

    Args:
        text: Any text, e.g. a stored value or an argument to echo.
        keep_newlines: Leave ``\\n`` as a line break. For a block that the
            caller laid out line by line itself, whose stored parts were
            escaped already (a JSON rendering escapes a stored newline as
            ``\\n``); any other line break in stored text must stay escaped,
            or a value could forge lines of output.

    Returns:
        Text safe to write to a terminal.
    """
    if text.isprintable():
        return text
    return "".join(_escape(char, keep_newlines) for char in text)


def printable_json(text: str) -> str:
    """JSON text with every character :func:`printable` escapes written as a JSON ``\\u`` escape.

    Meant for the output of ``json.dumps(..., ensure_ascii=False)``, which
    escapes C0 controls inside strings but leaves C1 controls, bidirectional
    overrides, separators and lone surrogates raw. Its raw newlines are its
    own indentation and stay. The result is still valid JSON and parses to the
    same value; a character above U+FFFF becomes a surrogate pair.
    """
    if text.replace("\n", "").isprintable():
        return text
    return "".join(_json_escape(char) if char != "\n" and _unsafe(char) else char for char in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _unsafe(char: str) -> bool:
    return not char.isprintable() and unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escape(char: str, keep_newlines: bool) -> str:
    if (char == "\n" and keep_newlines) or not _unsafe(char):
        return char
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def mask_dsn(dsn: str) -> str:
    """A connection string with its passwords replaced by ``***``.

    Handles a URL's user info (``postgresql://u:secret@h/db``), its query
    string (``?password=secret``, ``&sslpassword=...``, any case, keys
    percent-encoded or not) and libpq keyword strings
    (``host=h password=secret``, ``password='quoted secret'``,
    ``password = x``). Anything that is not a URL is read as keywords, so a
    file path passes through unchanged unless it holds ``password=``.

    Args:
        dsn: One connection string (or a file path), as a person typed it.

    Returns:
        The string, safe to print; masking more than needed rather than less.
    """
    if _URL_START.match(dsn.lstrip()):
        masked = _mask_userinfo(dsn, _DSN_SPAN)
        return _DSN_QUERY_PARAM.sub(_mask_query_param, masked)
    return _DSN_KEYWORD.sub(rf"\1{MASK}", dsn)


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """The secrets a connection string carries, in every form a driver may quote back.

    Pass them to :func:`mask_secrets` when showing a message from a driver
    that was given ``dsn``: drivers quote back fragments of a string they
    could not parse (a port, a key, a word after a space), which no pattern
    can recognise as a password.

    A URL's password is read three ways, since readers disagree on where it
    ends (libpq at the first ``@``, :func:`urllib.parse.urlsplit` at the last
    one before the path, a person at the last one on the line); its query's
    ``password=`` too. A keyword string is read as libpq reads it (single
    quotes, backslash escapes) and as a person meant it (an unquoted
    password running over the words after it that are not ``key=``). Each
    value comes as typed, unescaped and percent-decoded.
    """
    found = _url_passwords(dsn) if _URL_START.match(dsn.lstrip()) else _keyword_passwords(dsn)
    decoded = [urllib.parse.unquote(value) for value in found]
    return tuple(dict.fromkeys(secret for secret in [*found, *decoded] if secret and secret != MASK))


def connection_secrets(dsn: object = None, options: Mapping[str, object] | None = None) -> tuple[str, ...]:
    """The secrets of a connection a driver makes from ``dsn`` and keyword ``options``.

    For a pool of the caller's, which ilmek did not open but whose errors it
    reports: the pool keeps what it connects with (``password=`` among the
    keywords, or a DSN).

    Args:
        dsn: The pool's connection string, if it has one (anything else is ignored).
        options: Its keyword arguments; the text values of secret keys
            (``password``, ``sslpassword``...) are secrets, and a ``dsn`` or
            ``conninfo`` among them is read as a connection string.
    """
    found: list[str] = []
    for key, value in [("dsn", dsn), *(options or {}).items()]:
        if not isinstance(value, str):
            continue
        if key in {"dsn", "conninfo"}:
            found.extend(dsn_secrets(value))
        elif _SECRET_KEY_RE.match(key):
            found.append(value)
    return tuple(dict.fromkeys(secret for secret in found if secret))


def _url_passwords(dsn: str) -> list[str]:
    found = [dsn[start:end] for start, end in _userinfo(dsn, _DSN_SPAN)]
    with contextlib.suppress(ValueError):  # a malformed IPv6 host: the widest reading stands
        password = urllib.parse.urlsplit(dsn.strip()).password
        if password:
            found.append(password)
    for match in _DSN_QUERY_PARAM.finditer(dsn):
        if _is_secret_key(match.group(1)[1:-1]):
            found.append(match.group(2))
    return found


def _keyword_passwords(dsn: str) -> list[str]:
    found: list[str] = []
    for key, typed, value in _libpq_pairs(dsn):
        if _SECRET_KEY_RE.match(key):
            found += [typed, value]
    for match in _DSN_KEYWORD.finditer(dsn):
        value = match.group(0)[len(match.group(1)) :]
        found.append(value)
        if value[:1] in {"'", '"'}:
            value = value[1:-1] if len(value) > 1 and value[-1] == value[0] else value[1:]
            found.append(value)
        found.append(_BACKSLASH_ESCAPE.sub(r"\1", value))
    return found


def _libpq_pairs(dsn: str) -> list[tuple[str, str, str]]:
    """``key=value`` pairs as libpq's ``conninfo_parse`` reads them: (key, value as typed, value).

    A value is single-quoted (to the next unescaped quote, or the end) or
    runs to white space; in both a backslash takes the next character as it
    is. Reading stops where libpq would give up (a key without ``=``).
    """
    pairs: list[tuple[str, str, str]] = []
    position, end = 0, len(dsn)
    while True:
        position = _skip_space(dsn, position)
        key_end = position
        while key_end < end and dsn[key_end] != "=" and dsn[key_end] not in _LIBPQ_SPACE:
            key_end += 1
        equals = _skip_space(dsn, key_end)
        if key_end == position or equals >= end or dsn[equals] != "=":
            return pairs
        start = _skip_space(dsn, equals + 1)
        quoted = dsn.startswith("'", start)
        cursor = start + 1 if quoted else start
        value: list[str] = []
        while cursor < end:
            char = dsn[cursor]
            if char == "\\":
                value.append(dsn[cursor + 1 : cursor + 2])
                cursor += 2
                continue
            if (quoted and char == "'") or (not quoted and char in _LIBPQ_SPACE):
                cursor += 1 if quoted else 0
                break
            value.append(char)
            cursor += 1
        pairs.append((dsn[position:key_end], dsn[start:cursor], "".join(value)))
        position = cursor


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in _LIBPQ_SPACE:
        position += 1
    return position


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text (an error message, a log line) with passwords replaced by ``***``.

    Masks URLs with a password anywhere in the text, ``password=...``-style
    pairs (libpq keywords, URL query parameters, ``'password': ...`` in a
    mapping's repr or JSON), and, when given, known secret values: every
    run of text holding four or more characters in a row of one (so a
    password cut anywhere by a driver's message is hidden too; ordinary
    words that happen to share four characters with it are hidden with
    it), and each quoted fragment, however short, that is part of one.

    Args:
        text: The text to show.
        secrets: Secret values the text may echo, e.g. :func:`dsn_secrets` of
            the connection string a driver was given.

    Returns:
        The text, safe to print as far as passwords go (see :func:`printable`
        for control characters).
    """
    known = sorted({secret for secret in secrets if secret and secret != MASK}, key=len, reverse=True)
    masked = _mask_fragments(text, known)
    masked = _mask_userinfo(masked, _TEXT_SPAN)
    masked = _TEXT_QUERY_PARAM.sub(_mask_query_param, masked)
    masked = _TEXT_KEYWORD.sub(rf"\1{MASK}", masked)
    masked = _MAPPING_ENTRY.sub(rf"\1{MASK}", masked)
    if not known:
        return masked

    def fragment(match: re.Match[str]) -> str:
        quote = match.group(0)[0]
        inner = match.group(1) if match.group(1) is not None else match.group(2)
        if inner != MASK and any(inner in secret for secret in known):
            return f"{quote}{MASK}{quote}"
        return match.group(0)

    return _QUOTED_FRAGMENT.sub(fragment, masked)


def _mask_fragments(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every run of characters that holds a piece of a secret replaced by ``***``.

    A piece is any :data:`_MIN_BARE_SECRET` characters in a row of a secret:
    a driver may quote a password cut anywhere (at an ``@``, a ``:``, a
    space), so masking whole secrets only would let the rest through.
    """
    size = _MIN_BARE_SECRET
    pieces = {secret[i : i + size] for secret in secrets for i in range(len(secret) - size + 1)}
    if not pieces:
        return text
    hidden = [False] * len(text)
    for start in range(len(text) - size + 1):
        if text[start : start + size] in pieces:
            hidden[start : start + size] = [True] * size
    if not any(hidden):
        return text
    shown = []
    for position, char in enumerate(text):
        if not hidden[position]:
            shown.append(char)
        elif position == 0 or not hidden[position - 1]:
            shown.append(MASK)
    return "".join(shown)


def _userinfo(text: str, span: re.Pattern[str]) -> list[tuple[int, int]]:
    """Where the passwords of ``scheme://user:password@`` URLs in ``text`` are, as slices.

    A password runs to the last ``@`` of its span (a line, or a run of
    non-space characters); each span's last ``@`` is looked up once, so the
    time stays linear however many URLs a span holds.
    """
    found: list[tuple[int, int]] = []
    for part in span.finditer(text):
        last_at = text.rfind("@", part.start(), part.end())
        position = part.start()
        while last_at >= 0:
            match = _SCHEME_USER.search(text, position, last_at)
            if match is None:
                break
            if text.startswith(MASK + "@", match.end()):
                position = match.end() + len(MASK) + 1  # masked already
                continue
            # Whatever follows, up to that `@`, is inside this password.
            found.append((match.end(), last_at))
            break
    return found


def _mask_userinfo(text: str, span: re.Pattern[str]) -> str:
    pieces = []
    position = 0
    for start, end in _userinfo(text, span):
        pieces += [text[position:start], MASK]
        position = end
    return "".join(pieces) + text[position:]


def _is_secret_key(key: str) -> bool:
    return _SECRET_KEY_RE.match(urllib.parse.unquote(key).strip()) is not None


def _mask_query_param(match: re.Match[str]) -> str:
    head = match.group(1)
    if _is_secret_key(head[1:-1]):
        return head + MASK
    return match.group(0)
