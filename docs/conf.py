"""Sphinx configuration for ilmek's documentation (``python -m sphinx -W docs build/docs``).

The test suite builds these pages with warnings as errors and runs their
examples (``tests/integration/project/test_docs.py``), so a page that no
longer matches the code fails the tests.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The ilmek of this tree, not another one installed in the environment.
sys.path.insert(0, str(ROOT))

project = "ilmek"
author = "ilmek contributors"
copyright = "ilmek contributors"  # noqa: A001 - Sphinx's name
# Read like setuptools does (pyproject.toml's dynamic version), without importing ilmek here.
release = re.search(
    r'^__version__ = "([^"]+)"', (ROOT / "ilmek" / "__init__.py").read_text(encoding="utf-8"), re.M
).group(1)
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
]

# Google-style docstrings (Args: / Returns: / Raises:), the house style.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
# Signatures keep the annotations as written; the descriptions say what they mean.
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# The doctest builder runs every >>> block and every testcode block; a page's
# blocks share one namespace, in page order.
doctest_test_doctest_blocks = "default"

root_doc = "index"
exclude_patterns = ["_build"]
# Literal blocks (::) hold commands and output; Python is marked as such (code-block:: python).
highlight_language = "none"

html_theme = "alabaster"
html_title = f"ilmek {release}"
html_theme_options = {
    "description": "Stateful graphs, checkpointed to the database you already run",
    "fixed_sidebar": True,
    # Alabaster's 940 px leaves a 1440 px screen half empty and cuts code lines:
    # a wider page, and _static/ilmek.css wraps what is still too long.
    "page_width": "1180px",
    "body_max_width": "none",
}
html_static_path = ["_static"]
html_css_files = ["ilmek.css"]
