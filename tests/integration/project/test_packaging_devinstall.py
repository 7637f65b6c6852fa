"""The installed ilmek as tools and users meet it: types visible to mypy, never shadowed by a clone's folder.

These check the environment the tests run in. ``scripts/_env.sh`` installs
ilmek there with ``pip install -e``; pyproject.toml's ``package-dir`` makes
that a plain path entry in a ``.pth`` file. An editable install made through
an import hook (what setuptools does for a root-level package otherwise)
fails both: mypy does not run the hook, and the hook comes after the folders
on ``sys.path``, so a folder named ``ilmek`` in the current directory wins.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

USER_CODE = textwrap.dedent(
    """\
    import ilmek
    from ilmek import SqliteCheckpointer

    reveal_type(ilmek.run)
    reveal_type(SqliteCheckpointer)
    reveal_type(ilmek.PostgresCheckpointer)
    ilmek.graph(42)
    """
)
"""A user's module type-checked against the installed ilmek: reveals, and one wrong argument."""


def child_env() -> dict[str, str]:
    """This environment minus what would point Python at another tree than the installed one."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH", "PYTHONSTARTUP")}


def test_mypy_sees_the_installed_ilmek_and_its_types(tmp_path: pathlib.Path) -> None:
    """mypy, on a user's file outside the repository, finds ilmek's annotations (py.typed), lazy names too."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    (tmp_path / "app.py").write_text(USER_CODE, encoding="utf-8")
    command = ["--no-incremental", "--cache-dir", str(tmp_path / "cache"), "--show-error-codes", "app.py"]
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    out = checked.stdout
    # Without the types, ilmek is "import-not-found" and everything from it is Any.
    assert [] == [line for line in out.splitlines() if "import-" in line or '"Any"' in line], out
    run_type = (
        'app.py:4: note: Revealed type is "Overload(def [MappingStateT <: typing.Mapping[str, object]] '
    )
    run_type += "(graph: ilmek.graph.CompiledGraph[MappingStateT]"
    assert run_type in out, out
    assert "-> ilmek.checkpoint.sqlite.SqliteCheckpointer" in out, out
    assert "-> ilmek.checkpoint.postgres.PostgresCheckpointer" in out, out
    assert 'app.py:7: error: No overload variant of "graph" matches argument type "int"' in out, out
    assert 1 == checked.returncode, out


def test_a_folder_named_ilmek_in_the_current_directory_does_not_shadow_the_installed_one(
    tmp_path: pathlib.Path,
) -> None:
    """Next to a clone called ``ilmek/`` (no __init__.py at its top), `import ilmek` is still the package."""
    clone = tmp_path / "ilmek"
    clone.mkdir()
    for name in ("README.rst", "pyproject.toml", "tox.ini"):
        (clone / name).write_text("", encoding="utf-8")
    probe = "import ilmek; print(ilmek.__file__); print(ilmek.run.__module__)"
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, env=child_env()
    )
    assert 0 == found.returncode, found.stderr
    where, module = found.stdout.split()
    assert (True, "ilmek.engine") == (where.endswith(os.path.join("ilmek", "__init__.py")), module)
