"""The README's examples run as written."""

from __future__ import annotations

import doctest
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_examples_run() -> None:
    """Every >>> example in README.rst gives the output shown."""
    failures, tried = doctest.testfile(
        str(ROOT / "README.rst"), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert tried > 10
    assert 0 == failures
