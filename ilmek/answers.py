"""What a pause accepts as its answer: answer shapes, their JSON form, and the one check.

A shape is a frozen ``attrs`` value (:func:`choice`, :func:`text`,
:func:`number`, :func:`boolean`, :func:`review`, :func:`schema`). It is
data: :meth:`Shape.to_json` is what a pause stores (``Pending.answers``) and
:func:`from_json` rebuilds it, so a process without the graph (the console,
the CLI) can draw it and check an answer. :func:`check` is the only judge of
an answer: ``resume``, ``resume_keyed``, the deadline's ``on_timeout`` and
the node's replay all call it.

``shape.check(fn)`` adds a Python rule ``fn(answer) -> None | str`` (a string
is the reason to refuse). A function is not data: the stored form names it
only, and it runs where it is loaded (see :func:`check`).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, overload

import attrs

from .errors import IlmekError, InvalidArgumentError

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "Boolean",
    "Choice",
    "Number",
    "Review",
    "ReviewShape",
    "Schema",
    "Shape",
    "Text",
    "boolean",
    "check",
    "choice",
    "from_json",
    "number",
    "review",
    "schema",
    "text",
]

T = TypeVar("T")
Option = TypeVar("Option", str, int, float, bool, None)

PythonCheck = Callable[[Any], "str | None"]
"""A rule of the caller's: ``fn(answer)`` returns ``None`` to accept, or the reason to refuse."""


@attrs.frozen(kw_only=True)
class Review:
    """A person's verdict on a draft, as a review pause's node receives it.

    Attributes:
        action: ``"accept"``, ``"edit"`` or ``"reject"``.
        value: The draft on accept, the person's version on edit, ``None`` on reject.
        reason: Why, on reject (``None`` otherwise).
    """

    action: Literal["accept", "edit", "reject"]
    value: Any = None
    reason: str | None = None


# --- the Python checks a process has loaded ----------------------------------------------

# Functions with a name of their own (module or class level), by that name:
# what a resume in this process can run for a stored contract. Lambdas and
# nested functions share names across closures, so they are never looked up.
_CHECKS: dict[str, PythonCheck] = {}
_CHECKS_LOCK = threading.Lock()


def _remember(fn: PythonCheck) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    name = f"{module}.{qualname}"
    if "<" not in qualname:
        with _CHECKS_LOCK:
            _CHECKS[name] = fn  # a reloaded module's newer function wins
    return name


def _loaded(name: str) -> PythonCheck | None:
    """The function of that name loaded in this process, if any."""
    with _CHECKS_LOCK:
        return _CHECKS.get(name)


# --- the shapes ------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python, but not as an answer to a question.
    return type(a) is type(b) and a == b


@attrs.frozen(kw_only=True)
class Shape(Generic[T]):
    """An answer shape: what a pause accepts, and what its node receives (``T``).

    Attributes:
        checks: Python rules added with :meth:`check` (not stored; compared by identity).
    """

    kind: ClassVar[str] = ""
    checks: tuple[PythonCheck, ...] = attrs.field(default=(), eq=False, repr=False)
    check_names: tuple[str, ...] = attrs.field(default=(), repr=False)

    def check(self, fn: PythonCheck) -> Self:
        """A copy of this shape that also runs ``fn(answer)``: ``None`` accepts, a string refuses.

        ``fn`` runs where the graph's code is loaded: at ``resume``, before
        anything is written, when it is a function defined at module (or
        class) level that the resuming process has loaded; and always when
        the node replays the pause. A lambda or a nested function runs only
        then: its refusal fails the node after the answer was recorded.
        """
        if not callable(fn):
            raise InvalidArgumentError(f"shape.check() takes a function, got {type(fn).__name__}")
        name = _remember(fn)
        return attrs.evolve(self, checks=(*self.checks, fn), check_names=(*self.check_names, name))

    def to_json(self) -> dict[str, Any]:
        """The shape as JSON data: what a pause stores (Python checks by name only)."""
        form = {"kind": self.kind, **self._fields()}
        if self.check_names:
            form["checks"] = list(self.check_names)
        return form

    def refusal(self, answer: Any) -> str | None:
        """Why ``answer`` does not fit this shape's own rule (``None``: it fits)."""
        raise NotImplementedError

    def receive(self, answer: Any) -> T:
        """What the node receives for a recorded answer that fits."""
        return answer  # type: ignore[no-any-return]

    def wire(self, answer: Any) -> Any:
        """The answer as it is stored (a :class:`Review` becomes its wire form)."""
        return answer

    def _fields(self) -> dict[str, Any]:
        return {}


@attrs.frozen(kw_only=True)
class Choice(Shape[T]):
    """One of a fixed list of options (compared with their types: ``1`` is not ``True``)."""

    kind: ClassVar[str] = "choice"
    options: tuple[Any, ...]

    def refusal(self, answer: Any) -> str | None:
        if any(_same(answer, option) for option in self.options):
            return None
        return f"{answer!r} is not one of the options {', '.join(map(repr, self.options))}"

    def _fields(self) -> dict[str, Any]:
        return {"options": list(self.options)}


@attrs.frozen(kw_only=True)
class Text(Shape[str]):
    """Text, at most ``max_length`` characters, the whole of it matching ``pattern``."""

    kind: ClassVar[str] = "text"
    max_length: int | None = None
    pattern: str | None = None

    def refusal(self, answer: Any) -> str | None:
        if not isinstance(answer, str):
            return f"the answer must be text, got {type(answer).__name__}"
        if self.max_length is not None and len(answer) > self.max_length:
            return f"the answer is {len(answer)} characters long, more than the {self.max_length} allowed"
        if self.pattern is not None and re.fullmatch(self.pattern, answer) is None:
            return f"the answer does not match the pattern {self.pattern!r}"
        return None

    def _fields(self) -> dict[str, Any]:
        return {"max_length": self.max_length, "pattern": self.pattern}


@attrs.frozen(kw_only=True)
class Number(Shape[T]):
    """A number (never a bool), within ``minimum`` and ``maximum`` (inclusive), whole if ``integer``."""

    kind: ClassVar[str] = "number"
    minimum: float | None = None
    maximum: float | None = None
    integer: bool = False

    def refusal(self, answer: Any) -> str | None:
        if isinstance(answer, bool) or not isinstance(answer, int | float):
            return f"the answer must be a number, got {type(answer).__name__}"
        if self.integer and not isinstance(answer, int):
            return f"the answer must be a whole number, got {answer!r}"
        if isinstance(answer, float) and not math.isfinite(answer):
            return f"the answer must be a finite number, got {answer!r}"
        if self.minimum is not None and answer < self.minimum:
            return f"the answer {answer!r} is below the minimum {self.minimum!r}"
        if self.maximum is not None and answer > self.maximum:
            return f"the answer {answer!r} is above the maximum {self.maximum!r}"
        return None

    def _fields(self) -> dict[str, Any]:
        return {"minimum": self.minimum, "maximum": self.maximum, "integer": self.integer}


@attrs.frozen(kw_only=True)
class Boolean(Shape[bool]):
    """``True`` or ``False``."""

    kind: ClassVar[str] = "boolean"

    def refusal(self, answer: Any) -> str | None:
        return None if isinstance(answer, bool) else f"the answer must be true or false, got {answer!r}"


_REVIEW_FIELDS = {"accept": frozenset({"action"}), "edit": frozenset({"action", "value"})}
_REVIEW_FIELDS["reject"] = frozenset({"action", "reason"})


@attrs.frozen(kw_only=True)
class ReviewShape(Shape[Review]):
    """A draft the person accepts, edits or rejects with a reason; the node receives a :class:`Review`.

    The answer's wire form is ``{"action": "accept"}``, ``{"action": "edit",
    "value": V}`` or ``{"action": "reject", "reason": TEXT}`` (a
    :class:`Review` is taken too).
    """

    kind: ClassVar[str] = "review"
    draft: Any = None

    def wire(self, answer: Any) -> Any:
        if isinstance(answer, Review):
            return {
                "accept": {"action": "accept"},
                "edit": {"action": "edit", "value": answer.value},
                "reject": {"action": "reject", "reason": answer.reason},
            }.get(answer.action, {"action": answer.action})
        return answer

    def refusal(self, answer: Any) -> str | None:
        answer = self.wire(answer)
        if not isinstance(answer, Mapping):
            return 'a review\'s answer is {"action": "accept" | "edit" | "reject", ...}, got ' + repr(answer)
        fields = _REVIEW_FIELDS.get(answer.get("action"))  # type: ignore[arg-type]
        if fields is None:
            return f"a review's action is 'accept', 'edit' or 'reject', got {answer.get('action')!r}"
        if set(answer) != fields:
            return f"a review's {answer['action']!r} answer has exactly the fields {sorted(fields)}"
        reason = answer.get("reason")
        if answer["action"] == "reject" and not (isinstance(reason, str) and reason.strip()):
            return "a rejection needs a reason (non-empty text)"
        return None

    def receive(self, answer: Any) -> Review:
        answer = self.wire(answer)
        action = answer["action"]
        if action == "accept":
            return Review(action="accept", value=self.draft)
        if action == "edit":
            return Review(action="edit", value=answer["value"])
        return Review(action="reject", reason=answer["reason"])

    def _fields(self) -> dict[str, Any]:
        return {"draft": self.draft}


def _validator(json_schema: Mapping[str, Any]) -> Any:
    try:
        import jsonschema
    except ImportError as exc:
        raise IlmekError(
            "answers.schema() checks answers with the jsonschema package, which is not installed: "
            "pip install 'ilmek[schema]'"
        ) from exc
    try:
        jsonschema.Draft202012Validator.check_schema(json_schema)
    except jsonschema.SchemaError as exc:
        raise InvalidArgumentError(f"answers.schema() got an invalid JSON Schema: {exc.message}") from exc
    return jsonschema.Draft202012Validator(json_schema)


@attrs.frozen(kw_only=True)
class Schema(Shape[Any]):
    """Any JSON value valid under a JSON Schema (Draft 2020-12; the ``[schema]`` extra)."""

    kind: ClassVar[str] = "schema"
    json_schema: Mapping[str, Any]

    def refusal(self, answer: Any) -> str | None:
        error = next(iter(_validator(self.json_schema).iter_errors(answer)), None)
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path)
        return f"{error.message} (at /{where})" if where else error.message

    def _fields(self) -> dict[str, Any]:
        return {"schema": dict(self.json_schema)}


# --- building ----------------------------------------------------------------------------------


def choice(*options: Option) -> Choice[Option]:
    """One of ``options`` (text, numbers, booleans or ``None``), compared with their types."""
    if not options:
        raise InvalidArgumentError("answers.choice() needs at least one option")
    for option in options:
        if option is not None and not isinstance(option, str | int | float | bool):
            raise InvalidArgumentError(
                f"answers.choice() options are text, numbers, booleans or None, got {type(option).__name__}"
            )
    return Choice(options=options)


def text(*, max_length: int | None = None, pattern: str | None = None) -> Text:
    """Text of at most ``max_length`` characters whose whole matches ``pattern`` (a regular expression)."""
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)):
        raise InvalidArgumentError(f"max_length is a whole number, got {max_length!r}")
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise InvalidArgumentError(f"pattern {pattern!r} is not a regular expression: {exc}") from exc
    return Text(max_length=max_length, pattern=pattern)


@overload
def number(  # type: ignore[overload-overlap]  # an int is a float to mypy; integer=True narrows it
    *, minimum: float | None = None, maximum: float | None = None, integer: Literal[True]
) -> Number[int]: ...
@overload
def number(
    *, minimum: float | None = None, maximum: float | None = None, integer: bool = False
) -> Number[float]: ...
def number(
    *, minimum: float | None = None, maximum: float | None = None, integer: bool = False
) -> Number[Any]:
    """A number from ``minimum`` to ``maximum`` (both inclusive, ``None``: open); whole if ``integer``."""
    for name, bound in (("minimum", minimum), ("maximum", maximum)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            raise InvalidArgumentError(f"{name} is a number, got {bound!r}")
    return Number(minimum=minimum, maximum=maximum, integer=bool(integer))


def boolean() -> Boolean:
    """``True`` or ``False``."""
    return Boolean()


def review(draft: Any) -> ReviewShape:
    """A review of ``draft``: the node receives :class:`Review` (accept, edit or reject with a reason)."""
    return ReviewShape(draft=draft)


def schema(json_schema: Mapping[str, Any]) -> Schema:
    """Any answer valid under ``json_schema`` (JSON Schema 2020-12).

    Raises:
        IlmekError: the ``jsonschema`` package (``pip install 'ilmek[schema]'``) is not installed.
        InvalidArgumentError: ``json_schema`` is not a valid schema.
    """
    if not isinstance(json_schema, Mapping):
        raise InvalidArgumentError(f"answers.schema() takes a JSON Schema (a dict), got {json_schema!r}")
    _validator(json_schema)
    return Schema(json_schema=json_schema)


_KINDS: dict[str, Callable[[Mapping[str, Any]], Shape[Any]]] = {
    "choice": lambda f: Choice(options=tuple(f["options"])),
    "text": lambda f: Text(max_length=f.get("max_length"), pattern=f.get("pattern")),
    "number": lambda f: Number(minimum=f.get("minimum"), maximum=f.get("maximum"), integer=f["integer"]),
    "boolean": lambda f: Boolean(),
    "review": lambda f: ReviewShape(draft=f.get("draft")),
    "schema": lambda f: Schema(json_schema=f["schema"]),
}


def from_json(form: Mapping[str, Any]) -> Shape[Any]:
    """The shape a stored JSON form describes (its Python checks by name, run where loaded).

    Raises:
        InvalidArgumentError: ``form`` is not a shape's JSON form.
    """
    kind = form.get("kind") if isinstance(form, Mapping) else None
    build = _KINDS.get(kind) if isinstance(kind, str) else None
    if build is None:
        raise InvalidArgumentError(f"{form!r} is not the JSON form of an answer shape")
    try:
        shape = build(form)
    except (KeyError, TypeError) as exc:
        raise InvalidArgumentError(f"{form!r} is not the JSON form of a {kind} shape") from exc
    names = form.get("checks") or ()
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError(f"{form!r} names its checks wrongly")
    return attrs.evolve(shape, check_names=tuple(names))


def check(contract: Shape[Any] | Mapping[str, Any], answer: Any) -> str | None:
    """Why ``answer`` does not fit ``contract`` (a shape or its JSON form), or ``None`` if it does.

    The shape's own rule runs first, then its Python checks: a shape's own
    functions, or, for a stored form, the module-level functions of those
    names loaded in this process (a lambda, a nested function or one not
    loaded here is left to the node's replay of the pause).
    """
    shape = contract if isinstance(contract, Shape) else from_json(contract)
    reason = shape.refusal(answer)
    if reason is not None:
        return reason
    value = shape.receive(shape.wire(answer))
    checks: list[PythonCheck] = list(shape.checks)
    if not checks:
        checks = [fn for fn in map(_loaded, shape.check_names) if fn is not None]
    for fn in checks:
        reason = fn(value)
        if reason is not None:
            return str(reason)
    return None
