"""What the registry and both walks share.

The key that marks a tagged object, which time zone keys are stored (and
looked up again), and how types and values are named in error messages.
Nothing here knows any one tag.
"""

from __future__ import annotations

import re
from typing import Any, Final

_TAG: Final = "__ilmek__"
_ZONE_KEY: Final = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*\Z")


def _type_name(cls: type[Any]) -> str:
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", repr(cls))
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def _short_repr(key: Any) -> str:
    try:
        text = repr(key)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{_type_name(type(key))}>"
    return text if len(text) <= 60 else text[:57] + "..."
