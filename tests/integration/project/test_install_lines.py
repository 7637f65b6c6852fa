"""Each docs page, and the Flask and Django examples, say the one line that installs what they need.

For Flask the line is ``.venv/bin/pip install -e '.[postgres]' flask``:
ilmek with a driver, and the framework. Running it needs the network, so the
tests check what it would install instead: every module the page's code or
the example imports (and, for Django, the Postgres driver its settings name)
comes with those requirements, as the installed packages' own metadata says.
"""

from __future__ import annotations

import pathlib
import re
import shlex
import sys
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
    """What one ``pip install`` command asks for: for ilmek attrs and its extras' packages, others as is."""
    found = re.search(r"pip install ([^#&]+)", command)
    assert found is not None, command
    wanted: list[str] = []
    for word in shlex.split(found.group(1)):
        if word.startswith("-"):
            continue
        # ilmek itself: ``.``, ``../ilmek``, ``'.[postgres]'``, ``'dist/ilmek-0.1.0-....whl[postgres]'``.
        local = re.fullmatch(r"(?:\.|[^\[]*ilmek[^\[]*)(?:\[([a-z,]+)\])?", word)
        if local is None:
            wanted.append(word)
            continue
        extras = [extra for extra in (local.group(1) or "").split(",") if extra]
        wanted += ["attrs", *(requirement for extra in extras for requirement in EXTRAS[extra])]
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


PAGES = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.rst"))

NOT_INSTALLED_BY_THE_PAGE = {"docs/langgraph.rst": {"langgraph"}}
"""Imports a page shows but does not install: the LangGraph side of the comparison is the reader's own."""

INCLUDE = re.compile(r"^\.\. include:: (\S+)\n((?:   :[\w-]+:.*\n(?: {4,}\S.*\n)*)*)", re.M)
OPTION = re.compile(r"^   :([\w-]+): (.*)\n((?: {4,}\S.*\n)*)", re.M)
CODE_BLOCK = re.compile(r"\.\. (?:testcode|testsetup|testcleanup|doctest)::.*|\.\. code-block:: python")
IMPORT = re.compile(r"^\s*(?:>>> |\.\.\. )?\s*(?:import ([\w.]+(?:\s*,\s*[\w.]+)*)|from ([\w.]+) import)")


def page_text(path: pathlib.Path) -> str:
    """A page's text with its ``.. include::`` directives replaced by the part of the file they take."""

    def included(found: re.Match[str]) -> str:
        text = (path.parent / found.group(1)).read_text(encoding="utf-8")
        for name, first, more in OPTION.findall(found.group(2)):
            marker = "\n".join([first, *(line.strip() for line in more.splitlines())])
            if name == "start-after":
                text = text.split(marker, 1)[1]
            elif name == "end-before":
                text = text.split(marker, 1)[0]
        return text

    return INCLUDE.sub(included, path.read_text(encoding="utf-8"))


def code_lines(text: str) -> list[str]:
    """The lines of a page that are Python: its ``>>>`` examples and the bodies of its Python blocks."""
    lines = text.splitlines()
    code = [line for line in lines if line.lstrip().startswith((">>> ", "... "))]
    for number, line in enumerate(lines):
        if CODE_BLOCK.fullmatch(line.strip()):
            indent = len(line) - len(line.lstrip())
            for following in lines[number + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                code.append(following)
    return code


def third_party_modules_shown(text: str) -> set[str]:
    """The top-level modules a page's Python imports, less the stdlib and ilmek."""
    names: set[str] = set()
    for line in code_lines(text):
        if found := IMPORT.match(line):
            modules = found.group(1).split(",") if found.group(1) else [found.group(2)]
            names |= {module.strip().partition(".")[0] for module in modules}
    return names - set(sys.stdlib_module_names) - {"ilmek", "__future__"}


def requirements_said(text: str) -> list[str]:
    """Everything the page's ``pip install`` lines ask for: ilmek (attrs), its extras, other packages."""
    # Inline literals, paired left to right (one may break its line: ``pip install\nilmek[otel]``),
    # and the $ lines of console blocks.
    commands = [" ".join(found.group(1).split()) for found in re.finditer(r"``(.+?)``", text, re.S)]
    commands += [line for line in text.splitlines() if line.lstrip().startswith("$ ")]
    return [found for command in commands if "pip install " in command for found in requirements_of(command)]


def test_the_page_reader_finds_imports_and_install_lines() -> None:
    """The readers below see a page's imports and pip lines, so the next test cannot pass by seeing none."""
    flask_page = page_text(ROOT / "docs" / "flask.rst")
    assert {"flask", "werkzeug"} == third_party_modules_shown(flask_page)
    assert ["attrs", *EXTRAS["postgres"], "flask"] == requirements_said(flask_page)
    quick_start = page_text(ROOT / "docs" / "quickstart.rst")
    assert "psycopg2" in third_party_modules_shown(quick_start)  # from README.rst's part, included
    assert "PostgresCheckpointer(pool)" in quick_start
    assert ["attrs", "opentelemetry-api>=1.20"] == requirements_said(
        page_text(ROOT / "docs" / "operations.rst")
    )


@pytest.mark.parametrize("page", PAGES)
def test_each_page_says_how_to_install_what_its_code_imports(page: str) -> None:
    """Every third-party module a page's code imports comes with the pip install line the page shows."""
    text = page_text(ROOT / page)
    shown = third_party_modules_shown(text) - NOT_INSTALLED_BY_THE_PAGE.get(page, set())
    installed = modules_installed_by(requirements_said(text)) if shown else set()
    assert set() == shown - installed
