"""``python -m ilmek``: runs the command line of :mod:`ilmek.cli`."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
