"""The documentation is tested: README.rst's examples run; docs/ builds without a warning and runs its own.

The Sphinx site is built by ``sphinx-build`` in a child process, as a reader
would build it, once as HTML with warnings as errors and once with the doctest
builder, which runs every ``>>>`` and ``testcode`` block of every page (the
pages that include parts of README.rst run those too). Examples on Postgres
read ``DATABASE_URL``: here a new, empty database of the suite's server, so
the ``migrate()`` they call is what creates the tables, as on a reader's.
"""

from __future__ import annotations

import doctest
import io
import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from typing import Any

import docutils.core
import psycopg2.pool
import pytest

import ilmek
import ilmek.loading
import ilmek.operations
import ilmek.web
from ilmek import END, START, PostgresCheckpointer, SchemaVersionError, channel, graph, run
from tests.support.conftest_postgres import unavailable
from tests.support.installed import modules_installed_by, requirement_name
from tests.support.pgcluster import PostgresServer, dsn_to_url
from tests.support.web_browser_support import browser, find_browser

pytestmark = pytest.mark.timeout(300)

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
README = ROOT / "README.rst"

_names = itertools.count(1)


@pytest.fixture
def empty_database(postgres_server: PostgresServer) -> Iterator[str]:
    """The DSN of a new database without any table (not the suite's migrated template), dropped after."""
    name = f"docs_{os.getpid()}_{next(_names)}"
    postgres_server.drop_database(name)  # a leftover of a crashed run on an external server
    dsn = postgres_server.create_database(name)
    yield dsn
    postgres_server.terminate_backends(name)
    postgres_server.drop_database(name)


DOCS_EXTRA = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "optional-dependencies"
]["docs"]

ONLY_THESE_MODULES = """
import json, os, runpy, sys
allowed = frozenset(json.loads(os.environ["ILMEK_DOCS_MODULES"]))

class OnlyTheDocsExtra:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in allowed or top in sys.stdlib_module_names or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"{top} is not installed by ilmek[docs]", name=name)

sys.meta_path.insert(0, OnlyTheDocsExtra())
runpy.run_module("sphinx", run_name="__main__", alter_sys=True)
"""
"""``python -m sphinx`` in a process that can import only the stdlib and the modules given."""


def sphinx(
    builder: str, out: pathlib.Path, cwd: pathlib.Path, only_docs_extra: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """``sphinx-build -W --keep-going -b BUILDER docs OUT`` with this interpreter, its output captured.

    With ``only_docs_extra``, the build can import nothing but the stdlib, ilmek and
    what ``pip install -e '.[docs]'`` installs (the rest of the test extra is refused).
    """
    if only_docs_extra:
        modules = modules_installed_by(["ilmek", *DOCS_EXTRA]) | {"ilmek"}
        env = {**env, "ILMEK_DOCS_MODULES": json.dumps(sorted(modules))}
    start = ["-c", ONLY_THESE_MODULES] if only_docs_extra else ["-m", "sphinx"]
    return subprocess.run(
        [sys.executable, *start, "-W", "--keep-going", "-q", "-b", builder, str(DOCS), str(out)],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


# --- README.rst ------------------------------------------------------------------------------


@pytest.mark.postgres
def test_readme_examples_run(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, empty_database: str
) -> None:
    """Every >>> example in README.rst gives the output shown, the Postgres one on a new database."""
    monkeypatch.chdir(tmp_path)  # the SQLite file the Quick start opens lands here
    monkeypatch.setenv("DATABASE_URL", dsn_to_url(empty_database))
    failures, tried = doctest.testfile(
        str(README), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert tried > 10
    assert 0 == failures
    assert (tmp_path / "shop.db").is_file()


def test_readme_renders_without_warnings() -> None:
    """README.rst is valid reStructuredText: PyPI would render it as written."""
    warnings = io.StringIO()
    docutils.core.publish_string(
        README.read_text(encoding="utf-8"),
        writer="html",
        settings_overrides={"warning_stream": warnings, "report_level": 2, "halt_level": 5},
    )
    assert "" == warnings.getvalue()


def test_the_readme_is_a_front_page_with_the_newcomers_path_in_its_first_half() -> None:
    """README.rst fits on a few screens; install, SQLite, Postgres (migrate) and Flask/Django come first."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    steps = ["Installation", "Quick start", "SqliteCheckpointer(", "**On Postgres**", "In Flask and Django"]
    positions = [next(n for n, line in enumerate(lines, 1) if step in line) for step in steps]
    assert sorted(positions) == positions
    assert positions[-1] <= len(lines) / 2
    quick_start = "\n".join(lines[positions[1] : positions[-1]])
    assert ".migrate()" in quick_start
    assert quick_start.count(".raise_for_status()") >= 4


@pytest.mark.postgres
def test_a_run_on_a_new_postgres_database_fails_until_migrate(empty_database: str) -> None:
    """What the Quick start says: before migrate() the first run fails and says to migrate; after, it runs."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, empty_database)
    try:
        checkpointer = PostgresCheckpointer(pool)
        g = (
            graph("g", {"n": channel.last_write(0)})
            .node("add", lambda state: {"n": state["n"] + 1})
            .edge(START, "add")
            .edge("add", END)
            .compile(checkpointer=checkpointer)
        )
        with pytest.raises(SchemaVersionError, match=r"run migrate\(\) once at boot"):
            run(g, {"n": 1}, thread_id="t")
        checkpointer.migrate()
        assert {"n": 2} == run(g, {"n": 1}, thread_id="t").raise_for_status().state
    finally:
        pool.closeall()


# --- the Sphinx site -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def html_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, str]:
    """The HTML site, built once for the module with only the docs extra importable; its folder and output."""
    work = tmp_path_factory.mktemp("html")
    built = sphinx("html", work / "html", cwd=work, only_docs_extra=True)
    return work / "html", built.stdout + built.stderr if built.returncode else built.stderr.strip()


def test_the_docs_build_without_a_warning(html_build: tuple[pathlib.Path, str]) -> None:
    """``sphinx-build -W -b html docs`` succeeds with only the docs extra: toctrees, includes, docstrings."""
    html, problems = html_build
    assert "" == problems
    assert (html / "index.html").is_file()
    assert (html / "api.html").is_file()


def search_index(html: pathlib.Path) -> dict[str, Any]:
    """The site's search index, as Sphinx wrote it into ``searchindex.js``."""
    text = (html / "searchindex.js").read_text(encoding="utf-8")
    index: dict[str, Any] = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    return index


def public_names() -> set[str]:
    """Every name a user is told to import: ``ilmek.__all__`` and the public modules' ``__all__``."""
    names = {f"ilmek.{name}" for name in ilmek.__all__}
    for module in (ilmek.web, ilmek.operations, ilmek.serde, ilmek.loading):
        names |= {f"{module.__name__}.{name}" for name in module.__all__}
    names |= {"ilmek.mermaid.to_mermaid", "ilmek.web.serve.make_server", "ilmek.web.serve.serve"}
    names |= {"ilmek.web.serve.ConsoleServer"}
    # The operations re-exported from ilmek itself are documented there, under that name.
    return names - {f"ilmek.operations.{name}" for name in ilmek.__all__}


def test_every_public_name_is_in_the_api_reference(html_build: tuple[pathlib.Path, str]) -> None:
    """Each name of ``ilmek.__all__`` (and ilmek.web's, operations', serde's) is documented on an API page."""
    html, problems = html_build
    assert "" == problems
    index = search_index(html)
    documented = {
        f"{prefix}.{entry[4]}": index["docnames"][entry[0]]
        for prefix, entries in index["objects"].items()
        for entry in entries
    }
    assert {"ilmek.run", "ilmek.web.Console", "ilmek.connect"} <= public_names()
    assert [] == sorted(public_names() - set(documented))
    assert {"api/"} == {documented[name][:4] for name in public_names()}


def test_the_api_reference_is_a_contents_list_of_short_pages_with_titles_of_their_own(
    html_build: tuple[pathlib.Path, str],
) -> None:
    """api.html lists its pages; no page title is used twice, nor any title of an API page."""
    html, problems = html_build
    assert "" == problems
    index = search_index(html)
    pages = [name for name in index["docnames"] if name.startswith("api/")]
    assert len(pages) >= 5
    contents = (html / "api.html").read_text(encoding="utf-8")
    assert all(f'href="{page}.html"' in contents for page in pages)
    assert len(index["titles"]) == len(set(index["titles"]))
    reused = {
        title: [index["docnames"][found[0]] for found in places]
        for title, places in index["alltitles"].items()
        if len(places) > 1 and any(index["docnames"][found[0]].startswith("api") for found in places)
    }
    assert {"On this page"} >= set(reused)


def need_chromium() -> None:
    """Skip without Selenium or Chromium (fail under CI, as the console's browser tests do)."""
    pytest.importorskip("selenium")
    if find_browser() is None:
        unavailable("no chromium and chromedriver: apt-get install chromium chromium-driver")


CUT_CODE = """
return [...document.querySelectorAll('pre')]
  .filter(block => block.scrollWidth > block.clientWidth + 1
                || block.getBoundingClientRect().right > innerWidth)
  .map(block => block.textContent.slice(0, 80));
"""
"""The code blocks of the page shown whose text runs past their box or the window."""


@pytest.mark.parametrize("width", [1440, 390])
def test_no_code_line_is_cut_on_a_wide_screen_or_a_phone(
    html_build: tuple[pathlib.Path, str], width: int
) -> None:
    """In Chromium, every code block of the long-lined pages shows its whole text (it wraps, never clips)."""
    need_chromium()
    html, problems = html_build
    assert "" == problems
    cut: dict[str, list[str]] = {}
    with browser(width, 900) as driver:
        for page in ["quickstart", "console", "cli", "flask", "api/web"]:
            driver.get((html / f"{page}.html").as_uri())
            assert driver.execute_script("return document.querySelectorAll('pre').length") > 0
            cut[page] = driver.execute_script(CUT_CODE)
    assert {page: [] for page in cut} == cut


def test_each_api_page_is_a_few_screens_not_one_long_scroll(html_build: tuple[pathlib.Path, str]) -> None:
    """At 1440 px, no page of the API reference is taller than 15,000 px (the one page was 43,500 px)."""
    need_chromium()
    html, problems = html_build
    assert "" == problems
    pages = sorted(path.relative_to(html).as_posix() for path in (html / "api").glob("*.html"))
    assert len(pages) >= 6
    with browser(1440, 900) as driver:
        heights = {}
        for page in ["api.html", *pages]:
            driver.get((html / page).as_uri())
            heights[page] = driver.execute_script("return document.documentElement.scrollHeight")
    assert {} == {page: height for page, height in heights.items() if height > 15_000}


def test_the_readmes_docs_command_installs_sphinx_into_the_demos_virtualenv() -> None:
    """README.rst builds the HTML with one line that first installs the docs extra, which holds Sphinx."""
    readme = " ".join(README.read_text(encoding="utf-8").split())
    assert "``.venv/bin/pip install -e '.[docs]' && .venv/bin/python -m sphinx docs build/docs``" in readme
    assert ["sphinx"] == [requirement_name(requirement) for requirement in DOCS_EXTRA]
    assert "sphinx" in modules_installed_by(DOCS_EXTRA)


@pytest.mark.postgres
def test_the_docs_examples_run(tmp_path: pathlib.Path, empty_database: str) -> None:
    """``sphinx-build -b doctest docs`` runs every example of every page (Postgres too) without a failure."""
    built = sphinx("doctest", tmp_path / "doctest", cwd=tmp_path, DATABASE_URL=dsn_to_url(empty_database))
    report = (tmp_path / "doctest" / "output.txt").read_text(encoding="utf-8")
    assert 0 == built.returncode, built.stdout + built.stderr + report
    tests = re.search(r"^\s*(\d+) tests?$", report, re.M)
    assert tests is not None, report
    assert int(tests.group(1)) > 50, report
    assert re.search(r"^\s*0 failures in tests$", report, re.M), report


def test_every_page_is_reachable_from_the_readme() -> None:
    """Each page of docs/ is linked from README.rst (but the index, the Quick start and the changelog)."""
    readme = README.read_text(encoding="utf-8")
    pages = sorted(path.name for path in DOCS.glob("*.rst"))
    # The index is the site itself, the Quick start is README.rst's own text, the changelog is a file.
    unlinked = {"index.rst", "quickstart.rst", "changelog.rst"}
    assert [] == [name for name in pages if f"<docs/{name}>" not in readme and name not in unlinked]


def test_the_alembic_recipe_in_the_docs_is_the_one_the_alembic_test_runs() -> None:
    """docs/sqlalchemy.rst's migration recipe is, word for word but for the prefix, the one run by Alembic."""
    from tests.integration.cli.test_alembic_migrations import RECIPE

    page = (DOCS / "sqlalchemy.rst").read_text(encoding="utf-8")
    block = page.split(".. recipe-start", 1)[1].split(".. recipe-end", 1)[0]
    shown = [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith(":")]
    tested = [
        line.strip().replace(', table_prefix="shop"', "").replace('"shop"', '"ilmek"')
        for line in RECIPE.splitlines()
        if line.strip() and not line.startswith(('"""', "revision", "down_revision"))
    ]
    assert tested == [line for line in shown if not line.startswith(".. code-block")]


# --- the examples ----------------------------------------------------------------------------


GRAPH_RUNS = re.compile(r"\b(run|resume|run_reliably|stream|resume_stream)\(")
RUNNERS = sorted(
    path.relative_to(ROOT).as_posix()
    for path in (ROOT / "examples").rglob("*.py")
    if GRAPH_RUNS.search(path.read_text(encoding="utf-8"))
)
"""The examples that run a graph (the others are settings, URL maps and package markers)."""


def test_the_examples_that_run_graphs_are_found() -> None:
    """The scan below sees the scripts and both apps, so it cannot pass by finding nothing."""
    assert {
        "examples/django_app/views.py",
        "examples/flask_app.py",
        "examples/retrying.py",
        "examples/stream_checkout.py",
    } <= set(RUNNERS)


@pytest.mark.parametrize("script", RUNNERS)
def test_every_example_that_runs_a_graph_makes_a_failure_impossible_to_miss(script: str) -> None:
    """An example that runs a graph checks how it ended with raise_for_status(), never only reading status."""
    assert "raise_for_status(" in (ROOT / script).read_text(encoding="utf-8")
