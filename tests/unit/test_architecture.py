"""The layers' import rules, as ARCHITECTURE.md states them, checked on the source itself.

Read from the AST, so a rule holds for every import a module could make,
not only for the ones a test happens to run: the engine and its
collaborators import no backend, no driver and no framework; the storage
layer never imports the layers above it; ``import ilmek`` loads no driver.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ilmek"

DRIVERS_AND_FRAMEWORKS = ("sqlite3", "psycopg2", "psycopg", "psycopg_pool", "sqlalchemy", "django", "flask")
"""Third-party (and stdlib) database clients and web frameworks: the caller's, never the engine's."""

BACKENDS = (
    "ilmek.checkpoint.memory",
    "ilmek.checkpoint.sqlite",
    "ilmek.checkpoint.postgres",
    "ilmek.checkpoint.sql",
    "ilmek.checkpoint.django",
    "ilmek.checkpoint.callers",
    "ilmek.checkpoint._delta",
    "ilmek.checkpoint._records",
)
"""Modules that know how (or where) a backend stores things."""

ABOVE_STORAGE = (
    "ilmek.engine",
    "ilmek.execution",
    "ilmek.operations",
    "ilmek.host",
    "ilmek.cli",
    "ilmek.web",
)
"""Layers that use the checkpointers; the checkpointers never import them."""


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: pathlib.Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (inside functions too), relative ones resolved."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


ENGINE_FILES = sorted([PACKAGE / "engine.py", *(PACKAGE / "execution").glob("*.py")])
STORAGE_FILES = sorted((PACKAGE / "checkpoint").rglob("*.py"))


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda p: module_name(p))
def test_the_engine_imports_no_backend_driver_or_framework(path: pathlib.Path) -> None:
    """The engine and its collaborators reach storage only through the Checkpointer port."""
    forbidden = sorted(
        name
        for name in imported_modules(path)
        if within(name, BACKENDS) or within(name, DRIVERS_AND_FRAMEWORKS)
    )
    assert [] == forbidden


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda p: module_name(p))
def test_the_engine_names_no_framework(path: pathlib.Path) -> None:
    """No engine module even mentions a framework: what a framework needs is the checkpointer's to say."""
    text = path.read_text(encoding="utf-8").lower()
    assert [] == [name for name in ("django", "flask", "sqlalchemy", "psycopg") if name in text]


@pytest.mark.parametrize("path", STORAGE_FILES, ids=lambda p: module_name(p))
def test_storage_never_imports_the_layers_above_it(path: pathlib.Path) -> None:
    """Checkpointers know nothing of runs, operations, the CLI or the console."""
    assert [] == sorted(name for name in imported_modules(path) if within(name, ABOVE_STORAGE))


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: module_name(p))
def test_no_module_imports_a_driver_at_module_level(path: pathlib.Path) -> None:
    """A driver is imported only inside the function that needs it (or under TYPE_CHECKING), never on import.

    ``sqlite3`` is the one exception, in the SQLite backend only: it is the standard library's.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            top_level.add(node.module)
    allowed = ("sqlite3",) if module_name(path) == "ilmek.checkpoint.sqlite" else ()
    assert [] == sorted(
        name for name in top_level if within(name, DRIVERS_AND_FRAMEWORKS) and not within(name, allowed)
    )


def test_the_rules_see_relative_imports() -> None:
    """The checker resolves ``from ..checkpoint.sqlite import X`` (it would pass vacuously otherwise)."""
    found = imported_modules(PACKAGE / "checkpoint" / "postgres" / "__init__.py")
    assert "ilmek.checkpoint.sql" in found
    assert "ilmek.checkpoint.postgres.psycopg2" in found
