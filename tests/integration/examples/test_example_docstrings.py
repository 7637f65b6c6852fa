"""Each example's docstring says how to run it from a clone, and the command it shows works as written.

The commands name the project's interpreter, ``.venv/bin/python`` (a bare
``python`` outside the virtualenv cannot import ilmek). They run here from a
folder that holds only ``.venv`` and ``examples`` (links to the clone's), so
what they write lands there, and without ``PYTHONPATH``: ilmek comes from
the virtualenv, as it does for a user. The servers are started, asked once,
and stopped; the Django one runs its documented ``check``.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.support.cli_support import REPO_ROOT
from tests.support.pgcluster import dsn_to_url

pytestmark = pytest.mark.timeout(120)

EXAMPLES = sorted((REPO_ROOT / "examples").rglob("*.py"))
VENV_PYTHON = ".venv/bin/python"
# The examples that run to their end, and the servers (run until stopped).
SCRIPTS = ("examples/retrying.py", "examples/stream_checkout.py")


ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def split_command(command: str) -> tuple[dict[str, str], list[str]]:
    """A shell command's leading VAR=value words, and the rest."""
    words = shlex.split(command)
    assignments: dict[str, str] = {}
    while words and ASSIGNMENT.match(words[0]):
        key, value = words.pop(0).split("=", 1)
        assignments[key] = value
    return assignments, words


def documented_commands(path: pathlib.Path) -> list[str]:
    """The commands in a module docstring's literal blocks (indented lines) that run Python, comments cut."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    commands = []
    for line in docstring.splitlines():
        if not line.startswith("    ") or "python" not in line:
            continue
        command = line.split(" # ")[0].strip()
        _, words = split_command(command)
        if words and os.path.basename(words[0]).startswith("python"):
            commands.append(command)
    return commands


def test_every_example_says_to_run_it_with_the_projects_interpreter() -> None:
    """Every command an example's docstring shows starts the interpreter as .venv/bin/python, never bare."""
    shown = {path.relative_to(REPO_ROOT).as_posix(): documented_commands(path) for path in EXAMPLES}
    runnable = ["examples/retrying.py", "examples/stream_checkout.py", "examples/flask_app.py"]
    assert all(shown[name] for name in [*runnable, "examples/django_app/__main__.py"]), shown
    for name, commands in shown.items():
        for command in commands:
            assert VENV_PYTHON == split_command(command)[1][0], f"{name}: {command}"


@pytest.fixture
def clone_folder(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder that looks like a clone's root to the commands: its .venv and examples, nothing else."""
    python = REPO_ROOT / VENV_PYTHON
    if python.exists():
        (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    else:
        # Run by another interpreter (tox): it stands in for the clone's.
        (tmp_path / ".venv" / "bin").mkdir(parents=True)
        (tmp_path / VENV_PYTHON).symlink_to(sys.executable)
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    return tmp_path


def start(folder: pathlib.Path, command: str, **env: str) -> subprocess.Popen[str]:
    """Start a documented command as a shell would (its VAR=value words in its environment)."""
    assignments, argv = split_command(command)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment.update(assignments, **env)
    return subprocess.Popen(
        argv, cwd=folder, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_documented_commands_of_each_script_run_as_written(
    clone_folder: pathlib.Path, script: str
) -> None:
    """Each command the script's docstring shows exits 0 and prints what happened."""
    commands = documented_commands(REPO_ROOT / script)
    assert commands
    for command in commands:
        process = start(clone_folder, command)
        out, err = process.communicate(timeout=60)
        assert 0 == process.returncode, f"{command}\n{err}"
        assert out.strip(), command
        if script.endswith("retrying.py"):
            # The loop at work: busy tries, then the run, the email sent once.
            assert out.splitlines()[1].startswith("attempt 1: ThreadBusyError (thread 'signup-1' is held")
            assert out.endswith(
                "the run ended done: ['welcomed ada@example.com']\nthe welcome email was sent 1 time\n"
            ), out
    if script.endswith("stream_checkout.py"):
        assert (clone_folder / "shop.db").is_file()  # `--db shop.db`, where the command was run


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_flask_example_serves_as_its_docstring_says(clone_folder: pathlib.Path) -> None:
    """`.venv/bin/python examples/flask_app.py` serves the API (on PORT), its checkout.db written here."""
    [command] = [
        c for c in documented_commands(REPO_ROOT / "examples/flask_app.py") if "DATABASE_URL" not in c
    ]
    port = free_port()
    server = start(clone_folder, command, PORT=str(port))
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.communicate()[1]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/checkout/nobody", timeout=5) as answer:
                    status = answer.status
            except urllib.error.HTTPError as error:
                status = error.code
            except OSError:
                assert time.monotonic() < deadline, "the example never served"
                time.sleep(0.1)
                continue
            break
        assert 404 == status
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert (clone_folder / "checkout.db").is_file()


@pytest.mark.postgres
def test_the_django_example_runs_its_documented_check(clone_folder: pathlib.Path, postgres_dsn: str) -> None:
    """`DATABASE_URL=... .venv/bin/python -m examples.django_app check` creates its tables and passes."""
    [command] = [
        c for c in documented_commands(REPO_ROOT / "examples/django_app/__main__.py") if "check" in c
    ]
    assert "DATABASE_URL" in split_command(command)[0]
    # The documented database is the reader's; this one is the test's (an assignment after wins).
    process = start(clone_folder, command, DATABASE_URL=dsn_to_url(postgres_dsn))
    out, err = process.communicate(timeout=60)
    assert 0 == process.returncode, err
    assert "System check identified no issues" in out + err
