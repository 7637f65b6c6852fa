"""The distributions: an sdist that is the whole source and whose tests run, a wheel that is the package.

Both are built offline, the way a packager or a distribution would, from a
clean copy of this tree (no caches, no virtualenv, no stale ``*.egg-info``)
with the build backend of this environment (``python -m build
--no-isolation``), so no index is asked for anything.
"""

from __future__ import annotations

import email.parser
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

import ilmek

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[3]

NAME = f"ilmek-{ilmek.__version__}"

LEFT_BEHIND = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".tox",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.py[cod]",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "*.db",
    "*.db-*",
)
"""What working in a checkout leaves in it, none of it source."""

GENERATED = {"PKG-INFO"}
"""Files setuptools writes into every sdist (it also appends ``[egg_info]`` tags to setup.cfg)."""

NEEDED = (
    "LICENSE",
    "README.rst",
    "CHANGELOG.rst",
    "tox.ini",
    "pyproject.toml",
    "setup.cfg",
    ".ci/run",
    "scripts/_env.sh",
    "scripts/demo",
    "scripts/test",
    "ilmek/py.typed",
    "tests/__init__.py",
    "tests/conftest.py",
    "tests/support/conftest_postgres.py",
    "tests/support/helpers.py",
    "tests/support/pgcluster.py",
    "tests/support/pgbouncer.py",
    "tests/support/pgworker.py",
    "tests/support/crashworker.py",
    "tests/conformance/port/test_put_get_list.py",
    "tests/support/port.py",
    "examples/flask_app.py",
    "examples/stream_checkout.py",
    "examples/django_app/__main__.py",
    "benchmarks/_common.py",
    "benchmarks/bench_import.py",
)
"""What running the tests, the examples and the benchmarks from an sdist needs, named here."""


def child_env() -> dict[str, str]:
    """This environment minus what would point Python at another tree than the one under test."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """The sdist and the wheel built from it, and the sdist unpacked."""
    work = tmp_path_factory.mktemp("dists")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=LEFT_BEHIND)
    # Without isolation: the backend installed here (the test extra has it),
    # no download. build makes the sdist, then the wheel from the sdist.
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(work / "dist"), str(source)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    assert 0 == built.returncode, built.stdout + built.stderr
    (sdist,) = (work / "dist").glob("*.tar.gz")
    (wheel,) = (work / "dist").glob("*.whl")
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # 3.11.4 and later: no links out, no absolute names
            archive.extractall(work / "unpacked", filter="data")
        else:
            archive.extractall(work / "unpacked")  # our own sdist, just built
    return {"sdist": sdist, "wheel": wheel, "unpacked": work / "unpacked" / NAME}


def generated(name: str) -> bool:
    """Whether setuptools wrote this file of the sdist (not a source file)."""
    return name in GENERATED or ".egg-info/" in name


def sdist_files(sdist: pathlib.Path) -> set[str]:
    """The files in the sdist, relative to its top folder."""
    with tarfile.open(sdist) as archive:
        names = {member.name for member in archive.getmembers() if member.isfile()}
    assert all(name.startswith(f"{NAME}/") for name in names)
    return {name.removeprefix(f"{NAME}/") for name in names}


def source_files() -> set[str] | None:
    """The files git tracks or would track (not ignored), as they are now; None outside a clone."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return None
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return {name for name in listed if name and (ROOT / name).is_file()}


def collected(cwd: pathlib.Path) -> subprocess.Popen[str]:
    """Start ``pytest --collect-only`` in ``cwd`` with this interpreter."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(),
    )


def test_the_sdist_holds_what_the_tests_examples_and_benchmarks_need(dists: dict[str, pathlib.Path]) -> None:
    """The sdist has the license, docs, tox.ini, scripts, tests with their helpers, examples, benchmarks."""
    files = sdist_files(dists["sdist"])
    assert [] == [name for name in NEEDED if name not in files]
    assert any(name.endswith(".egg-info/PKG-INFO") for name in files)


def test_the_sdist_holds_every_source_file(dists: dict[str, pathlib.Path]) -> None:
    """Every file of the clone (tracked or new, not ignored) is in the sdist, and nothing else is."""
    source = source_files()
    if source is None:
        pytest.skip("not a git clone: nothing to compare the sdist with")
    files = {name for name in sdist_files(dists["sdist"]) if not generated(name)}
    assert (set(), set()) == (source - files, files - source)


# Two collections of the whole suite at once: seconds on an idle machine, minutes
# on a busy one; each has its own 300 s limit below.
@pytest.mark.timeout(660)
def test_pytest_collects_the_whole_suite_from_the_unpacked_sdist(dists: dict[str, pathlib.Path]) -> None:
    """From the unpacked sdist, pytest collects the same tests as from this tree, without an error."""
    unpacked = dists["unpacked"]
    probe = subprocess.run(
        [sys.executable, "-c", "import ilmek; print(ilmek.__file__)"],
        cwd=unpacked,
        capture_output=True,
        text=True,
        check=True,
        env=child_env(),
    )
    assert str(unpacked / "ilmek" / "__init__.py") == probe.stdout.strip()
    # Both at once: two collections of the whole suite take a few seconds each.
    there, here = collected(unpacked), collected(ROOT)
    out_there, _ = there.communicate(timeout=300)
    out_here, _ = here.communicate(timeout=300)
    assert 0 == there.returncode, out_there
    assert 0 == here.returncode, out_here
    ids_there = [line for line in out_there.splitlines() if "::" in line]
    ids_here = [line for line in out_here.splitlines() if "::" in line]
    assert len(ids_here) > 100
    assert ids_here == ids_there


def test_the_wheel_is_the_package_with_its_types_and_license(dists: dict[str, pathlib.Path]) -> None:
    """The wheel holds ilmek (py.typed included) and its metadata: no tests, examples or scripts."""
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = wheel.namelist()
        metadata = email.parser.Parser().parsestr(wheel.read(f"{NAME}.dist-info/METADATA").decode())
        entry_points = wheel.read(f"{NAME}.dist-info/entry_points.txt").decode()
    assert [] == [name for name in names if not name.startswith(("ilmek/", f"{NAME}.dist-info/"))]
    assert "ilmek/py.typed" in names
    assert f"{NAME}.dist-info/licenses/LICENSE" in names
    assert "MIT" == metadata["License-Expression"]
    assert ">=3.11" == metadata["Requires-Python"]
    assert ["attrs>=23.1"] == [req for req in metadata.get_all("Requires-Dist", []) if "extra ==" not in req]
    assert "text/x-rst" == metadata["Description-Content-Type"]
    assert "ilmek = ilmek.cli:main" in entry_points
