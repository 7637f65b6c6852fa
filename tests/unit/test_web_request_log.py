"""The request log's line: a secret's value hidden however the URL spells its name, the rest kept."""

from __future__ import annotations

import pytest

from ilmek.web.request_log import HIDDEN, log_line

SECRET = "s3cr3t-VALUE"


@pytest.mark.parametrize(
    "query",
    [
        "token=S",
        "%74oken=S",
        "tok%65n=S",
        "%2574oken=S",
        "%252574oken=S",
        "token=S&token=S",
        "Token=S",
        "a%3Dtoken=S",
        "q=1%26token%3DS",
        "q=1%2526token%253DS",
        "sig=S",
        "answer_token=S",
        "api-key=S",
        "x=1;password=S",
        "token%3DS",
    ],
)
def test_a_secret_value_is_hidden_however_its_name_is_spelled(query: str) -> None:
    """Encoded letters, separators and equals signs, twice encoded: the value never reaches the line."""
    line = log_line(f'"GET /thread?id=t1&{query.replace("S", SECRET)} HTTP/1.1" 303 0')
    assert SECRET not in line
    assert HIDDEN in line
    assert line.startswith('"GET /thread?id=t1&')


@pytest.mark.parametrize("query", ["q=auth-flow", "status=all&offset=50", "key=quote%230", "id=a%3Db"])
def test_ordinary_parameters_stay_as_sent(query: str) -> None:
    """A search for "auth-flow", a step key, an id holding "=": kept whole for the operator."""
    line = f'"GET /value?{query} HTTP/1.1" 200 10'
    assert line == log_line(line)


def test_the_line_is_escaped_for_a_terminal() -> None:
    """An escape sequence a client sent reads as text."""
    assert "\\x1b[31m" in log_line('"GET /?q=\x1b[31m HTTP/1.1" 200 1')
