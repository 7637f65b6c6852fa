"""What a ``pip install`` line brings, and what a folder of Python files imports (packaging tests).

Shared by the tests that hold the project's install instructions to the truth:
the extras in ``pyproject.toml``, the docs build with only the ``docs`` extra,
and the one-line installs the Flask and Django pages show.
"""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import sys
from collections.abc import Iterable

ROOT = pathlib.Path(__file__).resolve().parents[2]

LOCAL_MODULES = {"ilmek", "tests", "examples"} | {path.stem for path in (ROOT / "benchmarks").glob("*.py")}
"""Names imported from this tree (a benchmark script imports ``_common`` and, at times, another script)."""


def requirement_name(requirement: str) -> str:
    """The normalized distribution name of a requirement (``psycopg[binary]>=3.1`` -> ``psycopg``)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def modules_installed_by(requirements: Iterable[str]) -> set[str]:
    """The top-level modules of these installed distributions and of all they require (not their extras)."""
    wanted = {requirement_name(requirement) for requirement in requirements}
    seen: set[str] = set()
    while wanted - seen:
        name = sorted(wanted - seen)[0]
        seen.add(name)
        try:
            required = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not for this platform (colorama on Windows): not installed, so not importable
        wanted |= {requirement_name(req) for req in required if "extra ==" not in req}
    return {
        module
        for module, providers in importlib.metadata.packages_distributions().items()
        if {requirement_name(provider) for provider in providers} & seen
    }


def third_party_imports(*paths: str) -> set[str]:
    """Top-level modules imported by these Python files or folders, less the stdlib and this tree."""
    names: set[str] = set()
    for relative in paths:
        found = ROOT / relative
        for path in [found] if found.is_file() else found.rglob("*.py"):
            if "node_modules" in path.parts:
                continue  # npm packages scripts/test installs (katex ships Python scripts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.partition(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.partition(".")[0])
    return names - set(sys.stdlib_module_names) - LOCAL_MODULES - {"__future__"}
