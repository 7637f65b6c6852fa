"""The Quick start page, run as a newcomer would: its module written out, its commands in new processes.

``docs/quickstart.rst`` goes from ``pip install`` to a thread started in one
process, answered in another, and answered again in the web console. The
Python blocks are doctested with the rest of the site (``test_docs.py``);
here the shell steps run: the module the page shows is written, from the
page's own literal block, into an empty folder, and each ``$`` command runs
there as a subprocess (``python`` is this interpreter, ``ilmek`` is
``python -m ilmek``), its output compared with the page's. The install
lines need the network, so they are only checked to be the ones the
packaging tests build offline; the console is then used as the page says,
through a real HTTP request from its own inbox.
"""

from __future__ import annotations

import html
import os
import pathlib
import re
import shlex
import subprocess
import sys
import textwrap
import urllib.parse
import urllib.request

import attrs
import pytest

from ilmek import SqliteCheckpointer
from tests.support.web_support import fetch, stop_web, url_of

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "quickstart.rst"


@attrs.frozen
class Block:
    """A ``code-block`` of the page: its language, its caption and its text, dedented."""

    language: str
    caption: str
    text: str


@attrs.frozen
class Command:
    """A ``$`` line of a console block and the lines the page shows it printing."""

    words: list[str]
    output: list[str]


def code_blocks(page: str) -> list[Block]:
    """Every ``.. code-block::`` of an RST page, in order (options read, the body dedented)."""
    blocks = []
    lines = page.splitlines()
    for number, line in enumerate(lines):
        found = re.fullmatch(r"\.\. code-block:: (\w+)", line)
        if found is None:
            continue
        body, caption = [], ""
        rest = iter(lines[number + 1 :])
        for following in rest:
            option = re.fullmatch(r"   :caption: (.+)", following)
            if option:
                caption = option.group(1)
            elif not following.startswith("   :"):
                break
        for following in rest:
            if following and not following.startswith("    "):
                break
            body.append(following)
        blocks.append(Block(language=found.group(1), caption=caption, text=textwrap.dedent("\n".join(body))))
    return blocks


def commands(block: Block) -> list[Command]:
    """The commands of a console block, each with the output lines under it (comments cut)."""
    found: list[Command] = []
    for line in block.text.strip().splitlines():
        if line.startswith("$ "):
            found.append(Command(words=shlex.split(line[2:], comments=True), output=[]))
        else:
            found[-1].output.append(line)
    return found


def in_a_new_process(words: list[str]) -> list[str]:
    """What a newcomer types, as this interpreter runs it: ``python`` and ``ilmek`` both from here."""
    program, *arguments = words
    assert program in {"python", "ilmek"}, words
    return (
        [sys.executable, *arguments] if program == "python" else [sys.executable, "-m", "ilmek", *arguments]
    )


def answer_in_the_inbox(console: str, thread_id: str, button: str) -> str:
    """Press the inbox's ``button`` for ``thread_id`` over HTTP, as a browser does; the page it leads to."""
    status, inbox = fetch(console)
    assert 200 == status
    form = re.search(
        r'<form method="post" action="([^"]*/action/answer\?[^"]*)"[^>]*>(.*?)</form>', inbox, re.S
    )
    assert form is not None, inbox
    action = html.unescape(form.group(1))
    assert urllib.parse.quote(thread_id) in action
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(2)))
    pressed = re.search(
        rf'<button type="submit" name="([^"]+)" value="([^"]*)"[^>]*>{button}</button>', form.group(2)
    )
    assert pressed is not None, form.group(2)
    fields = {name: html.unescape(value) for name, value in fields.items()} | {pressed[1]: pressed[2]}
    origin = console.rstrip("/")
    request = urllib.request.Request(
        urllib.parse.urljoin(console, action),
        data=urllib.parse.urlencode(fields).encode("utf-8"),
        headers={"Origin": origin, "Content-Type": "application/x-www-form-urlencoded"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # follows the 303 back to the inbox
        assert 200 == response.status
        return str(response.read().decode("utf-8"))


def test_the_page_says_the_install_lines_first_and_shows_the_module_it_runs() -> None:
    """The first block installs (a virtualenv, then pip), the module block is approvals.py with build()."""
    blocks = code_blocks(PAGE.read_text(encoding="utf-8"))
    install = [command.words for command in commands(blocks[0])]
    assert [
        ["python3", "-m", "venv", ".venv", "&&", ".", ".venv/bin/activate"],
        ["pip", "install", "../ilmek[postgres]"],
    ] == (install)
    (module,) = [block for block in blocks if block.caption == "approvals.py"]
    assert "def build():" in module.text
    assert "ilmek web --db approvals.db --graph approvals:build --allow-actions" in PAGE.read_text(
        encoding="utf-8"
    )


def test_two_processes_and_the_console_run_as_the_page_shows(tmp_path: pathlib.Path) -> None:
    """start, an answer the contract refuses (nothing written), the right answer (each a new process), start
    again, ilmek web --graph approvals:build: the contract's Approve button finishes it."""
    blocks = code_blocks(PAGE.read_text(encoding="utf-8"))
    (module,) = [block for block in blocks if block.caption == "approvals.py"]
    (tmp_path / "approvals.py").write_text(module.text, encoding="utf-8")
    shell = [command for block in blocks[1:] if block.language == "console" for command in commands(block)]
    assert [words[:2] for words in (command.words for command in shell)] == [
        ["python", "approvals.py"],
        ["python", "approvals.py"],
        ["python", "approvals.py"],
        ["python", "approvals.py"],
        ["ilmek", "web"],
    ]
    environment = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    environment.pop("ILMEK_DB", None)
    for command in shell[:-1]:
        done = subprocess.run(
            in_a_new_process(command.words),
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (0, command.output) == (done.returncode, done.stdout.splitlines()), done.stderr
    web = shell[-1]
    # Port 0: the page's 8765 may be taken on this machine; the rest of the line is as shown.
    process = subprocess.Popen(
        in_a_new_process([*web.words, "--port", "0"]),
        cwd=tmp_path,
        env={**environment, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    try:
        console = url_of(first)
        assert web.output == [first.rstrip("\n").replace(console, "http://127.0.0.1:8765/")]
        status, inbox = fetch(console)
        assert 200 == status
        assert "Ship order-8?" in inbox
        assert "order-7" not in inbox  # answered: not waiting any more
        answer_in_the_inbox(console, "order-8", "Approve")
    finally:
        _, errors = stop_web(process)
    assert "Traceback" not in errors
    store = SqliteCheckpointer(tmp_path / "approvals.db")
    try:
        finished = {thread: store.get(thread) for thread in ("order-7", "order-8")}
        assert {"order-7": "done", "order-8": "done"} == {
            thread: store.get_thread(thread).status
            for thread in finished  # type: ignore[union-attr]
        }
        assert {"order-7": "shipped", "order-8": "shipped"} == {
            thread: checkpoint.channels["outcome"]  # type: ignore[union-attr]
            for thread, checkpoint in finished.items()
        }
    finally:
        store.close()
