"""Time zones by key: which keys are stored, and finding a stored key again.

A key read from stored data is looked up only in the system time zone
database (the files under ``zoneinfo.TZPATH``), never in the ``tzdata``
package, whose lookup imports modules named after the key.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import zoneinfo

_ZONE_KEY: Final = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*\Z")

_zones: dict[str, zoneinfo.ZoneInfo] = {}


def _load_zone(key: str) -> zoneinfo.ZoneInfo | None:
    """Return ZoneInfo(key) if the system time zone database has it, else None."""
    zone = _zones.get(key)
    if zone is not None:
        return zone
    if len(key) > 128 or _ZONE_KEY.match(key) is None:
        return None
    import zoneinfo

    # ZoneInfo falls back to the tzdata package, which means importing modules named
    # after the key; checking the files first keeps decoding import-free.
    if not any(os.path.isfile(os.path.join(directory, key)) for directory in zoneinfo.TZPATH):
        return None
    try:
        zone = zoneinfo.ZoneInfo(key)
    except (ValueError, OSError, LookupError):  # LookupError: ZoneInfoNotFoundError
        return None
    _zones[key] = zone
    return zone
