"""The query string of a threads page: its filters written back as the page reads them."""

from __future__ import annotations

import json
from collections.abc import Sequence

from . import json_input
from .reading import InboxQuery

__all__ = ["list_params", "shown_metadata"]


def shown_metadata(value: object) -> str:
    """A metadata filter value as it would be typed to mean the same (see ``parse_metadata_filter``)."""
    if not isinstance(value, str):
        return json.dumps(value)
    try:
        parsed = json_input.loads(value)
    except ValueError:
        return value
    # Text that reads as a JSON scalar ("3", "true") is quoted to stay text.
    return value if isinstance(parsed, (list, dict)) else json.dumps(value)


def list_params(query: InboxQuery, **changes: object) -> dict[str, str | int | Sequence[str] | None]:
    """The query string of the page ``query`` with ``changes``, defaults left out."""
    status = changes.get("status", query.status)
    offset = changes.get("offset", query.offset)
    return {
        "status": None if status == "interrupted" else str(status),
        "q": query.search or None,
        "meta": [f"{key}={shown_metadata(value)}" for key, value in query.metadata.items()] or None,
        "graph": query.graph or None,
        "updated": query.updated or None,
        "offset": int(str(offset)) or None,
        "limit": None if query.limit == 50 else query.limit,
    }
