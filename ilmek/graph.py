"""Building a graph and checking its structure; no execution happens here.

``graph(name, schema)`` returns a :class:`GraphBuilder`; ``.compile()``
validates it and freezes it into a :class:`CompiledGraph`, which also knows
how to plan the tasks that follow a superstep.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Generic, Never, TypeAlias, overload

import attrs

from .channel import Channel
from .checkpoint.base import Checkpointer
from .control import Command, RetryPolicy, Send
from .declarations import (
    END,
    START,
    Callback,
    EdgeSpec,
    NodeSpec,
    RouterSpec,
    checked_structure,
    destinations_tuple,
)
from .errors import GraphError
from .options import RunOptions
from .predicates import Predicate
from .schema import StateSchema
from .types import AttrsStateT, MappingStateT, ScheduledTask, StateT

if TYPE_CHECKING:
    from .context import NodeContext, PlanContext
    from .notices import PauseNotice

__all__ = [
    "END",
    "START",
    "CompiledGraph",
    "EdgeSpec",
    "GraphBuilder",
    "NodeSpec",
    "RouterSpec",
    "UnreachableNodeWarning",
    "graph",
]

UNNAMED: Final = "unnamed"
"""The name of a graph built from a spec whose ``name`` is ``null``."""


class UnreachableNodeWarning(UserWarning):
    """A node that no declared edge, router or ``destinations=`` leads to.

    Not an error: a node reached only by a ``command(goto=...)`` is legal
    (MODEL §15). Declaring ``destinations=`` on the node or router that routes
    there silences it, and lets drawings and checks see the route.
    """


Update: TypeAlias = "Mapping[str, Any] | Command | None"
"""What a node of a graph with a channel map or an ``attrs`` state returns."""

Guard: TypeAlias = "Callable[[StateT], object] | Callable[[StateT, PlanContext], object]"
"""An edge's ``when=`` function: ``when(state)`` or ``when(state, ctx)``, true to take the edge."""
Route: TypeAlias = "Callable[[StateT], Any] | Callable[[StateT, PlanContext], Any]"
"""A router: ``fn(state)`` or ``fn(state, ctx)`` returning node names, ``END`` or sends."""


@overload
def graph(name: str, schema: Mapping[str, Channel] | None = None) -> GraphBuilder[dict[str, Any]]: ...
@overload
def graph(name: str, schema: type[StateT]) -> GraphBuilder[StateT]: ...
def graph(name: str, schema: Mapping[str, Channel] | type | None = None) -> GraphBuilder[Any]:
    """Start building a graph.

    The builder, and the graph it compiles, are generic in the state nodes
    receive, so a type checker checks node signatures: ``dict[str, Any]``
    for a channel map, the class for an ``attrs`` class, the ``TypedDict``
    for a ``TypedDict`` (whose nodes must then return that ``TypedDict``:
    declare it ``total=False`` to return partial updates).

    Args:
        name: The graph's name, used in messages and exported specs.
        schema: A dict of channel name to channel (see :mod:`ilmek.channel`),
            an ``attrs`` class whose fields are the channels, a ``TypedDict``
            whose fields carry their fold with ``Annotated`` (e.g.
            ``Annotated[list[str], ilmek.append]``), or ``None`` to declare
            channels one by one with :meth:`GraphBuilder.channel`.
    """
    if not isinstance(name, str) or not name:
        raise GraphError(f"a graph needs a non-empty name, got {name!r}")
    return GraphBuilder(name, StateSchema.build(schema))


@attrs.define
class GraphBuilder(Generic[StateT]):
    """Collects channels, nodes, edges and routers; :meth:`compile` checks them.

    Every method returns the builder, so calls chain. ``named`` is ``False``
    only for a graph built from a spec whose ``name`` is ``null``. Generic in
    the state its nodes receive (see :func:`graph`).
    """

    name: str
    schema: StateSchema
    named: bool = attrs.field(default=True, kw_only=True)
    _nodes: list[NodeSpec] = attrs.field(factory=list, alias="_nodes")
    _edges: list[EdgeSpec] = attrs.field(factory=list, alias="_edges")
    _routers: list[RouterSpec] = attrs.field(factory=list, alias="_routers")
    _declared: list[EdgeSpec | RouterSpec] = attrs.field(factory=list, alias="_declared")

    def channel(self, name: str, channel: Channel) -> GraphBuilder[StateT]:
        """Declare a channel.

        Raises:
            GraphError: the name is not a non-empty string, contains NUL (no
                database can store it), or is already declared; ``channel`` is
                not an :mod:`ilmek.channel`; or the state is an ``attrs`` class.
        """
        self.schema = self.schema.with_channel(name, channel)
        return self

    # A node's body, as a type checker sees it: for a channel map or an attrs
    # class, any mapping of writes; for a TypedDict, the TypedDict itself, so a
    # write to an unknown key or of the wrong type is a type error. A TypedDict
    # gets one overload per arity: a lambda is inferred against one callable,
    # not against a union of two.
    @overload
    def node(
        self,
        name: str,
        fn: CompiledGraph[Any],
        *,
        retry: RetryPolicy | None = None,
        destinations: Iterable[str] | None = None,
        type: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> GraphBuilder[StateT]: ...
    @overload
    def node(
        self: GraphBuilder[dict[str, Any]],
        name: str,
        fn: Callable[[dict[str, Any]], Update] | Callable[[dict[str, Any], NodeContext], Update],
        *,
        retry: RetryPolicy | None = None,
        destinations: Iterable[str] | None = None,
        type: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> GraphBuilder[dict[str, Any]]: ...
    @overload
    def node(
        self: GraphBuilder[AttrsStateT],
        name: str,
        fn: Callable[[AttrsStateT], Update] | Callable[[AttrsStateT, NodeContext], Update],
        *,
        retry: RetryPolicy | None = None,
        destinations: Iterable[str] | None = None,
        type: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> GraphBuilder[AttrsStateT]: ...
    @overload
    def node(
        self: GraphBuilder[MappingStateT],
        name: str,
        fn: Callable[[MappingStateT], MappingStateT | Command | None],
        *,
        retry: RetryPolicy | None = None,
        destinations: Iterable[str] | None = None,
        type: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> GraphBuilder[MappingStateT]: ...
    @overload
    def node(
        self: GraphBuilder[MappingStateT],
        name: str,
        fn: Callable[[MappingStateT, NodeContext], MappingStateT | Command | None],
        *,
        retry: RetryPolicy | None = None,
        destinations: Iterable[str] | None = None,
        type: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> GraphBuilder[MappingStateT]: ...
    def node(
        self,
        name: str,
        fn: Callable[..., Any] | CompiledGraph[Any],
        *,
        retry: RetryPolicy | None = None,
        destinations: Iterable[str] | None = None,
        type: str | None = None,  # noqa: A002 - the spec's field name
        config: Mapping[str, Any] | None = None,
    ) -> GraphBuilder[Any]:
        """Add a node whose body is ``fn(state, ctx)`` or ``fn(state)``, or a subgraph.

        ``fn`` may be a compiled graph: the node then runs it as a subgraph
        (SPEC §5a). It receives the channels of the state that it also
        declares; the node's update is what it changed in them (an
        ``append`` channel gains only its new items), folded by this
        graph's reducers. Its checkpoints, pauses and events live under the
        namespace ``"<name>:<task key>"``.

        Args:
            name: Unique; not ``START``/``END``; no ``:`` or ``#`` (they
                delimit task and pause ids).
            fn: Returns a dict of channel writes, ``None``, or ``command(...)``.
                For a ``TypedDict`` state, type checkers want the
                ``TypedDict`` itself (declared ``total=False`` for partial
                updates), so they check every key and value it writes.
            retry: Re-run a failing body within its superstep.
            destinations: Nodes this node's ``command(goto=...)`` may route to.
                Optional: a goto needs no declaration. Declared, they are drawn
                by :meth:`CompiledGraph.to_mermaid`, exported by ``to_spec``,
                checked to be nodes, and count for reachability (a node no
                declared route reaches is an :class:`UnreachableNodeWarning`).
            type: The node's type in an exported spec (see ``to_spec``).
            config: The node's configuration in an exported spec.
        """
        if isinstance(fn, CompiledGraph):
            return self._subgraph_node(
                name, fn, retry=retry, destinations=destinations, type=type, config=config
            )
        self._nodes.append(
            NodeSpec(
                name=name,
                body=Callback.of(fn) if callable(fn) else Callback(fn, False),
                retry=retry,
                destinations=destinations_tuple(destinations),
                type=type,
                config=config or {},
            )
        )
        return self

    def _subgraph_node(
        self,
        name: str,
        child: CompiledGraph[Any],
        *,
        retry: RetryPolicy | None,
        destinations: Iterable[str] | None,
        type: str | None,  # noqa: A002 - the spec's field name
        config: Mapping[str, Any] | None,
    ) -> GraphBuilder[Any]:
        """A node whose body runs ``child`` as a subgraph (``type`` ``"subgraph"`` in a spec)."""
        from .subgraphs import SUBGRAPH_TYPE, subgraph_body

        self._nodes.append(
            NodeSpec(
                name=name,
                body=Callback.of(subgraph_body(child)),
                retry=retry,
                destinations=destinations_tuple(destinations),
                type=type or SUBGRAPH_TYPE,
                config={"graph": child.name} if config is None else config,
                subgraph=child,
            )
        )
        return self

    def edge(
        self,
        source: str,
        target: str,
        *,
        when: Guard[StateT] | Mapping[str, Any] | None = None,
    ) -> GraphBuilder[StateT]:
        """Add an edge; with ``when``, it is taken only if ``when(state, ctx)`` is true.

        ``when`` may also be a declarative predicate such as
        ``{"channel": "intent", "eq": "buy"}`` (see :mod:`ilmek.predicates`),
        which an exported spec can carry.
        """
        guard: Callback | None = None
        predicate: Mapping[str, Any] | None = None
        if isinstance(when, Mapping):
            compiled = Predicate(when)
            predicate = compiled.spec
            guard = Callback(compiled, False)
        elif when is not None:
            if not callable(when):
                raise GraphError(
                    f"edge {source!r} -> {target!r}: when= must be a function or a predicate dict"
                )
            guard = Callback.of(when)
        self._edges.append(EdgeSpec(source=source, target=target, guard=guard, predicate=predicate))
        self._declared.append(self._edges[-1])
        return self

    def router(
        self,
        source: str,
        fn: Route[StateT],
        *,
        destinations: Iterable[str] | None = None,
    ) -> GraphBuilder[StateT]:
        """Route after ``source`` with ``fn(state, ctx)``.

        ``fn`` returns a node name, ``END``, a :func:`~ilmek.send`, or a list
        mixing them. It runs at plan time, outside any task: it has no journal
        and must not have side effects. ``destinations`` (optional) declares
        where it may go; it is checked at compile time and at run time, and
        drawn by :meth:`CompiledGraph.to_mermaid`.
        """
        if not callable(fn):
            raise GraphError(f"router on {source!r} must be a function, got {fn!r}")
        self._routers.append(
            RouterSpec(source=source, route=Callback.of(fn), destinations=destinations_tuple(destinations))
        )
        self._declared.append(self._routers[-1])
        return self

    def compile(
        self,
        checkpointer: Checkpointer | None = None,
        *,
        recursion_limit: int | None = None,
        strict: bool | None = None,
        meta: Mapping[str, Any] | None = None,
        max_workers: int | None = None,
        on_pause: Callable[[PauseNotice], Any] | None = None,
        **per_run: Never,
    ) -> CompiledGraph[StateT]:
        """Check the structure and freeze the graph, binding run defaults to it.

        Bound options are what every :func:`~ilmek.run`, resume, stream and
        host helper (``thread_state``, ``history``...) of this graph uses
        unless the call passes its own, which wins::

            g = builder.compile(checkpointer=SqliteCheckpointer("app.db"))
            run(g, {"cart": ["mug"]}, thread_id="conv-42")
            resume(g, "yes", thread_id="conv-42")

        A node that no declared edge, router or ``destinations=`` reaches
        from ``START`` is legal (a ``command(goto=...)`` may lead there, MODEL
        §15) but draws an :class:`UnreachableNodeWarning` naming it and the fix.

        Args:
            checkpointer: Where this graph's threads live; a run then needs only a ``thread_id``.
            recursion_limit: The most supersteps a run may take.
            strict: Raise ``NondeterminismError`` when a replayed task skips a journal key.
            meta: What nodes read as ``ctx.meta``; a call's ``meta`` keys are laid over these.
            max_workers: Threads for a superstep's tasks.
            on_pause: ``fn(notice)`` for each pause a run opens, at least once (:mod:`ilmek.notices`).
            per_run: Refused: ``thread_id``, ``checkpoint_id``,
                ``expect_checkpoint_id`` and ``cancel`` belong to one run (a
                bound cancel event, once set, would abort every later run).

        Raises:
            GraphError: naming the culprit, for: a bad, reserved or duplicate
                node name, a node body that is not callable, an edge or router
                touching an unknown node, an edge out of ``END`` or into
                ``START``, or no way out of ``START``.
            InvalidArgumentError: a bound option is of the wrong type or value,
                or names one run.
        """
        defaults = RunOptions.binding(
            f"graph {self.name!r}",
            {
                "checkpointer": checkpointer,
                "recursion_limit": recursion_limit,
                "strict": strict,
                "meta": meta,
                "max_workers": max_workers,
                "on_pause": on_pause,
                **per_run,
            },
        )
        nodes = checked_structure(self.name, self._nodes, self._edges, self._routers)
        compiled: CompiledGraph[StateT] = CompiledGraph(
            name=self.name,
            schema=self.schema,
            nodes=nodes,
            edges=tuple(self._edges),
            routers=tuple(self._routers),
            declared=tuple(self._declared),
            named=self.named,
            defaults=defaults,
        )
        reachable = compiled.reachable()
        for name in nodes:
            if name not in reachable:
                warnings.warn(
                    f"node {name!r} of graph {self.name!r} cannot be reached from START by any "
                    "declared edge, router or destinations=; if a command(goto=...) routes there, "
                    f"add destinations=[{name!r}] to the node or router that routes there, "
                    "otherwise add an edge to it",
                    UnreachableNodeWarning,
                    stacklevel=2,
                )
        return compiled


def _read_only_nodes(nodes: Mapping[str, NodeSpec]) -> Mapping[str, NodeSpec]:
    return MappingProxyType(dict(nodes))


def _edge_tuple(edges: Iterable[EdgeSpec]) -> tuple[EdgeSpec, ...]:
    return tuple(edges)


def _router_tuple(routers: Iterable[RouterSpec]) -> tuple[RouterSpec, ...]:
    return tuple(routers)


def _connection_tuple(connections: Iterable[EdgeSpec | RouterSpec]) -> tuple[EdgeSpec | RouterSpec, ...]:
    return tuple(connections)


@attrs.frozen(kw_only=True)
class CompiledGraph(Generic[StateT]):
    """A validated, frozen graph: what ``run`` and friends execute.

    Nothing in it can change: ``nodes`` and ``channels`` are read-only
    mappings, edges and routers are tuples of frozen values, and the builder
    it came from can go on changing without touching it. Generic in the state
    its nodes receive, which ``Result.state`` and ``thread_state`` return.

    Attributes:
        name: The graph's name (:data:`UNNAMED` for a spec whose name is null).
        named: ``False`` when built from a spec whose ``name`` is ``null``;
            ``to_spec`` then writes ``null`` back.
        defaults: The run options bound by ``compile()`` (or :meth:`bind`):
            ``None`` in a field means none is bound. Not part of the graph's
            identity: ``to_spec`` ignores it and equality does too.
    """

    name: str
    schema: StateSchema
    nodes: Mapping[str, NodeSpec] = attrs.field(converter=_read_only_nodes)
    edges: tuple[EdgeSpec, ...] = attrs.field(converter=_edge_tuple)
    routers: tuple[RouterSpec, ...] = attrs.field(converter=_router_tuple)
    #: Edges and routers in the order they were declared (drawings keep it);
    #: empty means every edge, then every router.
    declared: tuple[EdgeSpec | RouterSpec, ...] = attrs.field(default=(), converter=_connection_tuple)
    named: bool = True
    defaults: RunOptions = attrs.field(factory=RunOptions, eq=False)
    _order: Mapping[str, int] = attrs.field(init=False, alias="_order")
    # Derived once, for planning every superstep: each source's edges and
    # routers (in declaration order), and the task of each node planned by name.
    _outgoing: Mapping[str, tuple[tuple[EdgeSpec, ...], tuple[RouterSpec, ...]]] = attrs.field(
        init=False, alias="_outgoing", eq=False, repr=False
    )
    _planned: Mapping[str, ScheduledTask] = attrs.field(init=False, alias="_planned", eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_order", MappingProxyType({name: i for i, name in enumerate(self.nodes)}))
        if not self.declared:
            object.__setattr__(self, "declared", (*self.edges, *self.routers))
        sources = {edge.source for edge in self.edges} | {router.source for router in self.routers}
        outgoing = {
            source: (
                tuple(edge for edge in self.edges if edge.source == source),
                tuple(router for router in self.routers if router.source == source),
            )
            for source in sources
        }
        object.__setattr__(self, "_outgoing", MappingProxyType(outgoing))
        planned = {name: ScheduledTask(node=name, task_key=name) for name in self.nodes}
        object.__setattr__(self, "_planned", MappingProxyType(planned))

    @property
    def channels(self) -> Mapping[str, Channel]:
        """The declared channels."""
        return self.schema.channels

    @property
    def checkpointer(self) -> Checkpointer | None:
        """The checkpointer bound by ``compile(checkpointer=...)``, if any."""
        return self.defaults.checkpointer

    def bind(
        self,
        checkpointer: Checkpointer | None = None,
        *,
        recursion_limit: int | None = None,
        strict: bool | None = None,
        meta: Mapping[str, Any] | None = None,
        max_workers: int | None = None,
        on_pause: Callable[[PauseNotice], Any] | None = None,
        **per_run: Never,
    ) -> CompiledGraph[StateT]:
        """A copy of this graph with these run defaults bound over its own.

        The graph itself does not change. What is not given keeps its
        current binding; ``None`` never unbinds (compile the builder again
        for a graph bound to less). Arguments as for
        :meth:`GraphBuilder.compile`.

        Raises:
            InvalidArgumentError: a bound option is of the wrong type or value,
                or names one run.
        """
        given = RunOptions.binding(
            f"graph {self.name!r}",
            {
                "checkpointer": checkpointer,
                "recursion_limit": recursion_limit,
                "strict": strict,
                "meta": meta,
                "max_workers": max_workers,
                "on_pause": on_pause,
                **per_run,
            },
        )
        return attrs.evolve(self, defaults=given.over(self.defaults))

    def reachable(self) -> set[str]:
        """The nodes that some path from ``START`` may reach."""
        everything = set(self.nodes)
        seen: set[str] = set()
        frontier = [START]
        while frontier:
            source = frontier.pop()
            targets: set[str] = {e.target for e in self.edges if e.source == source}
            for router in self.routers:
                if router.source == source:
                    targets |= set(router.destinations) if router.destinations is not None else everything
            spec = self.nodes.get(source)
            if spec is not None and spec.destinations:
                targets |= set(spec.destinations)
            for target in targets - seen - {END}:
                seen.add(target)
                frontier.append(target)
        return seen

    def to_mermaid(
        self, *, direction: str = "TD", include_routers: bool = True, highlight: Any = None
    ) -> str:
        """The graph as Mermaid flowchart text; see :func:`ilmek.mermaid.to_mermaid`.

        Args:
            direction: ``TD`` (the default), ``TB``, ``BT``, ``LR`` or ``RL``.
            include_routers: ``False`` leaves routers' arrows out.
            highlight: A checkpoint whose next tasks and open pauses are marked.
        """
        from .mermaid import to_mermaid  # mermaid imports this module: import late

        drawing: str = to_mermaid(
            self, direction=direction, include_routers=include_routers, highlight=highlight
        )
        return drawing

    # --- planning ---------------------------------------------------------------

    def plan(
        self,
        sources: Sequence[tuple[str, Command | None]],
        state: Any,
        ctx: Any,
    ) -> tuple[ScheduledTask, ...]:
        """The tasks that follow ``sources`` (in task order), given the new state.

        Each source is a node that just ran (or ``START``) with the command it
        returned, if any. See :meth:`targets` and :meth:`schedule`.
        """
        names: set[str] = set()
        sends: list[Send] = []
        for source, cmd in sources:
            more_names, more_sends = self.targets(source, cmd, state, ctx)
            names |= more_names
            sends.extend(more_sends)
        return self.schedule(names, sends)

    def targets(self, source: str, cmd: Command | None, state: Any, ctx: Any) -> tuple[set[str], list[Send]]:
        """Where the run goes after ``source``: node names and sends.

        A command's ``goto`` replaces the node's static edges and routers.

        Raises:
            GraphError: a router or goto named an unknown node or returned
                something that is not a target.
            Exception: whatever a guard or router raised, unchanged.
        """
        names: set[str] = set()
        sends: list[Send] = []
        if cmd is not None and cmd.goto is not None:
            self._collect(cmd.goto, f"the goto of node {source!r}", None, names, sends)
            return names, sends
        edges, routers = self._outgoing.get(source, ((), ()))
        for edge in edges:
            if (edge.guard is None or edge.guard(state, ctx)) and edge.target != END:
                names.add(edge.target)
        for router in routers:
            self._collect(
                router.route(state, ctx),
                f"the router on {source!r}",
                router.destinations,
                names,
                sends,
            )
        return names, sends

    def schedule(self, names: set[str], sends: Sequence[Send]) -> tuple[ScheduledTask, ...]:
        """Task order: planned nodes once each in declaration order, then sends as made.

        The n-th send to a node becomes task ``node#n``.
        """
        tasks = [self._planned[name] for name in sorted(names, key=self._order.__getitem__)]
        counts: dict[str, int] = {}
        for item in sends:
            index = counts.get(item.node, 0)
            counts[item.node] = index + 1
            key = f"{item.node}#{index}"
            if key in names:
                # A node may be named like a send's task ("w#0"), as in the
                # reference; only both in one superstep cannot be told apart.
                raise GraphError(
                    f"send {index} to node {item.node!r} would be task {key!r}, which is also the name "
                    f"of a node planned in the same superstep; rename node {key!r}",
                    node=key,
                )
            tasks.append(ScheduledTask(node=item.node, task_key=key, is_send=True, input=item.input))
        return tuple(tasks)

    def _collect(
        self,
        target: Any,
        who: str,
        allowed: tuple[str, ...] | None,
        names: set[str],
        sends: list[Send],
    ) -> None:
        items = target if isinstance(target, (list, tuple)) else [target]
        for item in items:
            if isinstance(item, Send):
                name = item.node
            elif isinstance(item, str):
                name = item
            else:
                raise GraphError(
                    f"{who} returned {item!r}; return a node name, END, send(...) or a list of them"
                )
            if name != END and name not in self.nodes:
                known = ", ".join(repr(n) for n in self.nodes) or "none"
                raise GraphError(
                    f"{who} routed to unknown node {name!r}; known nodes: {known} (or END)",
                    node=name,
                )
            if allowed is not None and name not in allowed:
                raise GraphError(
                    f"{who} routed to {name!r}, which is not among its destinations {list(allowed)}",
                    node=name,
                )
            if isinstance(item, Send):
                if name == END:
                    raise GraphError(f"{who} sent to END; sends go to nodes")
                sends.append(item)
            elif name != END:
                names.add(name)
