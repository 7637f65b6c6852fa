"""The README's examples run as written."""

from __future__ import annotations

import doctest
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_readme_examples_run() -> None:
    """Every >>> example in README.rst gives the output shown."""
    failures, tried = doctest.testfile(
        str(ROOT / "README.rst"), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert tried > 10
    assert 0 == failures


def test_readme_renders_without_warnings() -> None:
    """README.rst is valid reStructuredText: PyPI would render it as written."""
    import io

    import docutils.core

    warnings = io.StringIO()
    docutils.core.publish_string(
        (ROOT / "README.rst").read_text(encoding="utf-8"),
        writer="html",
        settings_overrides={"warning_stream": warnings, "report_level": 2, "halt_level": 5},
    )
    assert "" == warnings.getvalue()
