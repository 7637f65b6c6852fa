"""Small helpers shared by the test modules."""

from __future__ import annotations

import threading
from collections import Counter


class Calls(Counter[str]):
    """Counts calls by name, thread-safely: what a journaled step really ran."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def hit(self, name: str) -> None:
        with self._lock:
            self[name] += 1
