"""Finding the user's compiled graph from a ``MODULE:NAME`` reference (``ilmek recover``, ``ilmek web``).

Only the command line names what is imported, never a database: a graph
name stored in a checkpoint is looked up among the graphs loaded this way.
"""

from __future__ import annotations

import importlib
import os
import sys

from .errors import InvalidArgumentError
from .graph import CompiledGraph

__all__ = ["load_graph", "load_graphs"]


def load_graph(reference: str) -> CompiledGraph:
    """Import ``module.path:attribute`` (attributes may be dotted) and return that compiled graph.

    The current folder is searched first, as ``python -m`` would, so a module
    next to the user's code is found without installing it. A builder is
    compiled; a function taking no arguments is called.

    Raises:
        InvalidArgumentError: the reference is malformed, the module or the
            attribute is missing, or it is not a graph.
    """
    if not isinstance(reference, str) or reference.count(":") != 1:
        raise InvalidArgumentError(
            f"a graph is named MODULE:NAME (e.g. myapp.flows:checkout), got {reference!r}"
        )
    module_name, attribute = reference.split(":")
    if not module_name or not attribute:
        raise InvalidArgumentError(
            f"a graph is named MODULE:NAME (e.g. myapp.flows:checkout), got {reference!r}"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidArgumentError(
            f"cannot import module {module_name!r} for {reference!r}: {error}"
        ) from error
    found: object = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as error:
            raise InvalidArgumentError(f"module {module_name!r} has no {attribute!r}") from error
    if not isinstance(found, CompiledGraph) and hasattr(found, "compile"):
        found = found.compile()
    if not isinstance(found, CompiledGraph) and callable(found):
        found = found()
    if not isinstance(found, CompiledGraph):
        raise InvalidArgumentError(
            f"{reference!r} is a {type(found).__name__}, not a compiled graph "
            "(call .compile() on the builder)"
        )
    return found


def load_graphs(references: list[str]) -> dict[str, CompiledGraph]:
    """Several graphs by reference, keyed by their names (a name given twice is refused)."""
    graphs: dict[str, CompiledGraph] = {}
    for reference in references:
        graph = load_graph(reference)
        if graph.name in graphs:
            raise InvalidArgumentError(
                f"two graphs are named {graph.name!r}; checkpoints find graphs by name"
            )
        graphs[graph.name] = graph
    return graphs
