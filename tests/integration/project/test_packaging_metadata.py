"""The project's bookkeeping tells the truth: versions tested, what the tests need, what git ignores."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

import ilmek

ROOT = pathlib.Path(__file__).resolve().parents[3]

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

LOCAL_MODULES = {"ilmek", "tests", "examples", "_common"}
"""Names imported from this tree (``_common`` is the benchmarks' shared module)."""


def requirement_name(requirement: str) -> str:
    """The normalized distribution name of a requirement (``psycopg[binary]>=3.1`` -> ``psycopg``)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def third_party_imports(*folders: str) -> set[str]:
    """Top-level modules imported by the Python files under ``folders``, less the stdlib and this tree."""
    names: set[str] = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            if "node_modules" in path.parts:
                continue  # npm packages scripts/test installs (katex ships Python scripts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.partition(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.partition(".")[0])
    return names - set(sys.stdlib_module_names) - LOCAL_MODULES - {"__future__"}


def test_classifiers_name_exactly_the_python_versions_tox_tests() -> None:
    """A `Programming Language :: Python :: 3.x` classifier for each pyXY environment of tox, and no other."""
    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    envlist = [name.strip() for name in tox["tox"]["envlist"].split(",")]
    tested = {f"3.{name[3:]}" for name in envlist if re.fullmatch(r"py3\d+", name)}
    classified = {
        match.group(1)
        for classifier in PROJECT["classifiers"]
        if (match := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier))
    }
    assert tested == classified
    floor = min(tested, key=lambda version: int(version.split(".")[1]))
    assert f">={floor}" == PROJECT["requires-python"]


def test_the_test_extra_installs_everything_the_tests_examples_and_benchmarks_import() -> None:
    """Every third-party module that tests/, examples/ or benchmarks/ import comes from a declared package."""
    extras = PROJECT["optional-dependencies"]
    declared = {requirement_name(req) for req in [*PROJECT["dependencies"], *extras["test"]]}
    if "ilmek" in declared:  # the test extra pulls others in by name: ilmek[lint]
        declared |= {requirement_name(req) for req in extras["lint"]}
    providers = importlib.metadata.packages_distributions()
    undeclared = {
        module: sorted(providers.get(module, ["(not installed)"]))
        for module in sorted(third_party_imports("tests", "examples", "benchmarks"))
        if not {requirement_name(dist) for dist in providers.get(module, [])} & declared
    }
    assert {} == undeclared


def test_the_installed_metadata_is_this_version() -> None:
    """The installed distribution's version is ilmek.__version__ (a stale install would differ)."""
    assert ["version"] == PROJECT["dynamic"]
    assert ilmek.__version__ == importlib.metadata.version("ilmek")


def test_the_databases_the_examples_and_the_demo_write_are_ignored_by_git() -> None:
    """checkout.db (flask_app.py), a --db file, their WAL and journal files: none shows up in git status."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git clone")
    written = [
        "checkout.db",
        "checkout.db-wal",
        "checkout.db-shm",
        "examples/checkout.db",
        "examples/checkout.db-journal",
        "shop.db",
    ]
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", *written], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert written == checked.stdout.splitlines()
