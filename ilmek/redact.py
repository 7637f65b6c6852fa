"""Making text safe to show: passwords masked (the CLI's fuller version merges here)."""

from __future__ import annotations

import re

__all__ = ["mask_secrets"]

# A secret's value runs to the end of a quoted string (libpq allows spaces in
# quoted values, with \' inside) or else to the next space.
_SECRET = re.compile(
    r"""(password|passwd|pwd|secret)\s*=\s*(?:'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|\S+)""",
    re.IGNORECASE,
)


def mask_secrets(text: str) -> str:
    """``text`` with anything like a password replaced by ``***``."""
    return _SECRET.sub(r"\1=***", text)
