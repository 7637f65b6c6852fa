"""The two ways a command ends in failure, each printed as one ``ilmek: ...`` line on stderr.

:func:`ilmek.cli.main` catches both: a failed command exits with status 1, a
wrong command line with status 2.
"""

from __future__ import annotations


class _CommandFailed(Exception):
    """A command cannot do what it was asked; its message is printed as ``ilmek: ...``."""


class _UsageError(Exception):
    """The command line itself is wrong; printed as ``ilmek: ...``, exit status 2."""
