"""The project's bookkeeping tells the truth: versions tested, what the tests need, what git ignores."""

from __future__ import annotations

import configparser
import importlib.metadata
import pathlib
import re
import shutil
import subprocess
import tomllib

import pytest

import ilmek
from tests.support.installed import requirement_name, third_party_imports

ROOT = pathlib.Path(__file__).resolve().parents[3]

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def extras_named_by(requirements: list[str]) -> list[str]:
    """The extras of ilmek itself that ``requirements`` pull in (``ilmek[docs,lint]`` -> docs, lint)."""
    return [
        extra.strip()
        for requirement in requirements
        if (match := re.fullmatch(r"ilmek\[([^\]]+)\]", requirement))
        for extra in match.group(1).split(",")
    ]


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
    # The test extra pulls others in by name: ilmek[docs,lint].
    for named in extras_named_by(extras["test"]):
        declared |= {requirement_name(req) for req in extras[named]}
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
