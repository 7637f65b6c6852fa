"""Answer shapes (ilmek.answers): what each accepts and refuses, their JSON form, and Python checks."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ilmek
from ilmek import Review, answers
from ilmek.errors import AnswerRejectedError, IlmekError, InvalidArgumentError, ResumeError


def test_exports_follow_the_spec() -> None:
    """ilmek exposes the answers module, Review and AnswerRejectedError, a ResumeError."""
    assert ilmek.answers is answers
    assert ilmek.Review is Review
    assert issubclass(ilmek.AnswerRejectedError, ResumeError)
    assert issubclass(AnswerRejectedError, IlmekError)


@pytest.mark.parametrize(
    ("shape", "accepted", "refused"),
    [
        (answers.choice("yes", "no"), ["yes", "no"], ["maybe", "YES", None, 1]),
        (answers.choice(1, 2), [1, 2], [True, 1.5, "1"]),
        (answers.choice(True, None), [True, None], [1, False, "true"]),
        (answers.text(), ["", "anything"], [None, 3, b"bytes"]),
        (answers.text(max_length=3), ["abc", ""], ["abcd"]),
        (answers.text(pattern=r"[a-z]+"), ["abc"], ["abc1", "1abc", ""]),
        (answers.number(), [0, -3.5, 10**20], [True, "3", None, math.inf, math.nan]),
        (answers.number(minimum=1, maximum=5), [1, 5, 2.5], [0, 5.01, -1]),
        (answers.number(integer=True), [3, -4], [3.0, 2.5, False]),
        (answers.boolean(), [True, False], [0, 1, "true", None]),
        (
            answers.review("draft"),
            [
                {"action": "accept"},
                {"action": "edit", "value": "mine"},
                {"action": "reject", "reason": "rude"},
                Review(action="accept"),
                Review(action="reject", reason="too long"),
            ],
            [
                "accept",
                {"action": "approve"},
                {"action": "accept", "value": "x"},
                {"action": "edit"},
                {"action": "reject"},
                {"action": "reject", "reason": "  "},
                Review(action="reject"),
            ],
        ),
        (
            answers.schema({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}),
            [{"n": 1}, {"n": 2, "more": True}],
            [{"n": "1"}, {}, [1], None],
        ),
    ],
)
def test_each_shape_accepts_and_refuses(
    shape: answers.Shape[Any], accepted: list[Any], refused: list[Any]
) -> None:
    """Every shape accepts what it promises and refuses the rest with a reason, from its JSON form too."""
    stored = answers.from_json(json.loads(json.dumps(shape.to_json())))
    for contract in (shape, stored, shape.to_json()):
        for answer in accepted:
            assert answers.check(contract, answer) is None, answer
        for answer in refused:
            reason = answers.check(contract, answer)
            assert isinstance(reason, str), answer
            assert reason, answer


@given(st.text(), st.integers(min_value=0, max_value=8))
def test_text_length_is_the_limit(value: str, limit: int) -> None:
    """text(max_length=N) accepts exactly the texts of at most N characters."""
    assert (answers.check(answers.text(max_length=limit), value) is None) == (len(value) <= limit)


@given(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)))
def test_number_bounds_are_inclusive(value: float) -> None:
    """number(minimum, maximum) accepts exactly the numbers between the bounds, the bounds included."""
    shape = answers.number(minimum=-10, maximum=10)
    assert (answers.check(shape, value) is None) == (-10 <= value <= 10)


def test_the_pattern_must_match_the_whole_text() -> None:
    """A pattern matching only a part of the answer refuses it (fullmatch, not search)."""
    assert answers.check(answers.text(pattern=r"\d{4}"), "12345") is not None
    assert answers.check(answers.text(pattern=r"\d{4}"), "1234") is None


def test_review_answers_reach_the_node_as_reviews() -> None:
    """A review's wire forms become Reviews: the draft on accept, the edit on edit, the reason on reject."""
    shape = answers.review({"to": "ann", "body": "hi"})
    assert shape.receive({"action": "accept"}) == Review(action="accept", value={"to": "ann", "body": "hi"})
    assert shape.receive({"action": "edit", "value": "new"}) == Review(action="edit", value="new")
    assert shape.receive({"action": "reject", "reason": "no"}) == Review(action="reject", reason="no")
    assert shape.wire(Review(action="edit", value=3)) == {"action": "edit", "value": 3}


def _no_weekends(day: str) -> str | None:
    return "not on a weekend" if day in ("sat", "sun") else None


def test_a_python_check_adds_a_refusal_and_is_named_in_the_json_form() -> None:
    """shape.check(fn) refuses what fn refuses; the stored form names fn and a loaded fn runs from it."""
    plain = answers.choice("mon", "sat")
    checked = plain.check(_no_weekends)
    assert plain.checks == ()  # a new shape: the original is unchanged
    assert answers.check(checked, "sat") == "not on a weekend"
    assert answers.check(checked, "mon") is None
    form = checked.to_json()
    assert form["checks"] == [f"{__name__}._no_weekends"]
    assert answers.check(form, "sat") == "not on a weekend"


def test_a_check_without_a_name_of_its_own_is_left_to_the_replay() -> None:
    """A stored check naming no loaded function, a lambda or a nested function is skipped by check()."""
    form = answers.choice("a", "b").to_json() | {"checks": ["nowhere.loaded"]}
    assert answers.check(form, "a") is None

    def nested(answer: str) -> str:
        return "nested"

    for fn in (lambda a: "lambda", nested):
        shape = answers.choice("a").check(fn)
        assert answers.check(shape.to_json(), "a") is None
        assert answers.check(shape, "a") is not None


def test_a_review_check_sees_the_review() -> None:
    """A Python check on a review receives the Review value, not the wire form."""
    seen: list[Any] = []
    shape = answers.review("d").check(lambda r: seen.append(r))
    assert answers.check(shape, {"action": "accept"}) is None
    assert seen == [Review(action="accept", value="d")]


@pytest.mark.parametrize(
    "build",
    [
        lambda: answers.choice(),
        lambda: answers.choice(object()),
        lambda: answers.text(max_length=True),
        lambda: answers.text(pattern="("),
        lambda: answers.number(minimum="1"),
        lambda: answers.schema({"type": 12}),
        lambda: answers.schema("not a schema"),
        lambda: answers.choice("a").check("not callable"),
        lambda: answers.from_json({"kind": "telepathy"}),
        lambda: answers.from_json({"kind": "choice"}),
    ],
)
def test_malformed_shapes_are_refused_when_made(build: Any) -> None:
    """A shape that could never be answered, or a form that is no shape, is an InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        build()


def test_schema_without_jsonschema_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the jsonschema package, answers.schema() says to install the [schema] extra."""
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    with pytest.raises(IlmekError, match=r"ilmek\[schema\]"):
        answers.schema({"type": "string"})
