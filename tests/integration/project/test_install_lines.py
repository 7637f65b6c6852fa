"""The Flask and Django guides and their examples say the one line that installs what they need.

The line is ``.venv/bin/pip install -e '.[postgres]' flask`` (or ``django``):
ilmek with a driver, and the framework. Running it needs the network, so the
test checks what it would install instead: every module the example imports
(and, for Django, the Postgres driver its settings name) comes with those
requirements, as the installed packages' own metadata says.
"""

from __future__ import annotations

import pathlib
import re
import shlex
import tomllib

import pytest

from tests.support.installed import modules_installed_by, third_party_imports

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "optional-dependencies"
]

GUIDES = {
    "flask": ("docs/flask.rst", "examples/flask_app.py", ["examples/flask_app.py"]),
    "django": ("docs/django.rst", "examples/django_app/__main__.py", ["examples/django_app"]),
}
"""Framework: its guide, the file whose docstring says how to run the example, the example's files."""


def install_lines(path: str) -> list[str]:
    """The ``.venv/bin/pip install`` commands a page or a docstring shows, prompts and comments cut."""
    text = (ROOT / path).read_text(encoding="utf-8")
    return [
        found.group(1).split(" # ")[0].strip()
        for found in re.finditer(r"^\s*(?:\$ )?(\.venv/bin/pip install .*)$", text, re.M)
    ]


def requirements_of(command: str) -> list[str]:
    """What ``pip install -e '.[a,b]' pkg`` asks for: ilmek's dependencies, its extras', and pkg."""
    words = shlex.split(command)
    assert [".venv/bin/pip", "install"] == words[:2], command
    wanted = ["attrs"]
    for word in words[2:]:
        if word == "-e":
            continue
        if local := re.fullmatch(r"\.\[([a-z,]+)\]", word):
            wanted += [req for extra in local.group(1).split(",") for req in EXTRAS[extra]]
        else:
            wanted.append(word)
    return wanted


@pytest.mark.parametrize("framework", sorted(GUIDES))
def test_the_guide_and_its_example_show_the_same_one_line_install(framework: str) -> None:
    """The guide and the example's docstring show one install line each, the same: ilmek[postgres] + it."""
    page, docstring, _ = GUIDES[framework]
    expected = f".venv/bin/pip install -e '.[postgres]' {framework}"
    assert [expected] == install_lines(page)
    assert [expected] == install_lines(docstring)
    assert "scripts/test" not in (ROOT / docstring).read_text(encoding="utf-8").split('"""')[1]


@pytest.mark.parametrize("framework", sorted(GUIDES))
def test_the_one_line_install_brings_every_module_the_example_imports(framework: str) -> None:
    """Each third-party module the example imports (flask, werkzeug, django, psycopg2) comes with the line."""
    page, _, files = GUIDES[framework]
    (line,) = install_lines(page)
    installed = modules_installed_by(requirements_of(line))
    imported = third_party_imports(*files)
    assert {framework} <= imported
    assert set() == imported - installed
    # Django imports the driver its settings' ENGINE names (postgresql), the Flask app psycopg2.pool.
    assert "psycopg2" in installed
