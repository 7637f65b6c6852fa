"""The registry of user classes that may be stored.

What belongs here: :func:`register`, :func:`is_registered`, how a registered
class is stored and rebuilt (``_ClassSpec``), and the two dicts every lookup
of a registered class goes through: by type when encoding, by stored name
when decoding (the only place a name read from data is ever looked up).
"""

from __future__ import annotations

import enum
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, overload

import attrs

from .tags import _TAG, _type_name

_ClassT = TypeVar("_ClassT", bound=type[Any])


@attrs.frozen
class _ClassSpec:
    """How one registered class is stored and rebuilt."""

    name: str
    cls: type[Any]
    is_enum: bool
    # A pydantic model: stored through model_dump, rebuilt with model_validate.
    is_pydantic: bool
    # attribute name -> __init__ keyword, or None for init=False fields
    init_keywords: dict[str, str | None]


_specs_by_type: dict[type[Any], _ClassSpec] = {}
_specs_by_name: dict[str, _ClassSpec] = {}
_registry_lock = threading.Lock()


@overload
def register(cls: _ClassT, /, *, name: str | None = None) -> _ClassT: ...


@overload
def register(cls: None = None, /, *, name: str | None = None) -> Callable[[_ClassT], _ClassT]: ...


def register(cls: Any = None, /, *, name: str | None = None) -> Any:
    """Allow instances of a class to be stored, and rebuilt when read back.

    Usable as ``@register``, ``@register(name="x")`` or ``register(Cls)``.

    Args:
        cls: An attrs class, a dataclass, an ``enum.Enum`` subclass or a
            pydantic model (stored through ``model_dump``, rebuilt with
            ``model_validate``: LangChain's message classes are such models).
        name: The name stored with each instance. Defaults to
            ``f"{cls.__module__}.{cls.__qualname__}"``; pass one to keep stored
            data readable after moving or renaming the class.

    Returns:
        ``cls`` itself, or a decorator that registers and returns its argument
        when ``cls`` is omitted.

    Raises:
        TypeError: ``cls`` is not an attrs class, dataclass, Enum or pydantic model, or ``name``
            is not a non-empty str.
        ValueError: ``name`` already belongs to a different class, or ``cls``
            is already registered under another name.
    """
    if cls is None:

        def decorator(target: _ClassT) -> _ClassT:
            return _register(target, name)

        return decorator
    return _register(cls, name)


def _register(cls: _ClassT, name: str | None) -> _ClassT:
    if not isinstance(cls, type):
        raise TypeError(
            "ilmek.serde.register() takes a class (an attrs class, a dataclass, an "
            f"enum.Enum subclass or a pydantic model), not a {_type_name(type(cls))} value"
        )
    if name is None:
        name = f"{cls.__module__}.{cls.__qualname__}"
    elif type(name) is not str or not name:
        raise TypeError(f"ilmek.serde.register(name=...) must be a non-empty str, got {name!r}")
    init_keywords: dict[str, str | None] = {}
    is_enum = is_pydantic = False
    if issubclass(cls, enum.Enum):
        is_enum = True
    elif _is_pydantic_model(cls):
        is_pydantic = True
        for field_name, field in cls.model_fields.items():
            # model_dump(by_alias=True) writes the alias, which model_validate reads.
            stored_as = field.alias or field_name
            init_keywords[stored_as] = stored_as
    elif attrs.has(cls):
        is_enum = False
        for attribute in attrs.fields(cls):
            init_keywords[attribute.name] = attribute.alias if attribute.init else None
    elif _is_dataclass(cls):
        import dataclasses

        is_enum = False
        for field in dataclasses.fields(cls):
            init_keywords[field.name] = field.name if field.init else None
    else:
        raise TypeError(
            f"ilmek.serde.register() accepts attrs classes, dataclasses, enum.Enum "
            f"subclasses and pydantic models; {_type_name(cls)} is none of these. Make it one of them, or "
            "store a plain value (dict, list, str, ...) instead"
        )
    for field_name in init_keywords:
        # The stored field map must stay a plain JSON object that is not a tag.
        # (A pydantic model is rebuilt from a mapping, so an alias need not be an identifier.)
        if field_name == _TAG or not (is_pydantic or field_name.isidentifier()):
            raise TypeError(
                f"{_type_name(cls)} has a field named {field_name!r}, which ilmek cannot "
                f"store (field names must be identifiers other than {_TAG!r})"
            )
    spec = _ClassSpec(
        name=name, cls=cls, is_enum=is_enum, is_pydantic=is_pydantic, init_keywords=init_keywords
    )
    with _registry_lock:
        holder = _specs_by_name.get(name)
        if holder is not None and holder.cls is not cls:
            raise ValueError(
                f"cannot register {_type_name(cls)} as {name!r}: that name is already "
                f"registered for {_type_name(holder.cls)} (a different class). Pass "
                "another name=... to ilmek.serde.register()"
            )
        previous = _specs_by_type.get(cls)
        if previous is not None and previous.name != name:
            raise ValueError(
                f"cannot register {_type_name(cls)} as {name!r}: it is already registered "
                f"as {previous.name!r}, and a class has exactly one stored name"
            )
        _specs_by_type[cls] = spec
        _specs_by_name[name] = spec
    return cls


def is_registered(cls: Any) -> bool:
    """Tell whether instances of ``cls`` can be stored.

    Args:
        cls: Any object; only classes can be registered.

    Returns:
        True if ``cls`` itself (not merely a base class) was passed to :func:`register`.
    """
    return isinstance(cls, type) and cls in _specs_by_type


def _is_pydantic_model(cls: type[Any]) -> bool:
    # Only when the application has imported pydantic: ilmek never imports it.
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None)
    return isinstance(base, type) and issubclass(cls, base)


def _is_dataclass(value: Any) -> bool:
    dataclasses = sys.modules.get("dataclasses")
    return dataclasses is not None and bool(dataclasses.is_dataclass(value))
