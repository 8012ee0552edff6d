"""The import graph of ``src/tether``: no cycles, and imports point down the layer list.

The layers are the ones drawn in ARCHITECTURE.md and docs/architecture.md, top to bottom.
A module may import its own package, any module of its own layer's packages that does not
close a cycle, and anything in a lower layer. Every import counts: module level, inside
functions (lazy), under ``TYPE_CHECKING``, and, in a module that calls
``importlib.import_module``, every string constant naming a module (``"pkg.mod"`` or
``"pkg.mod:attr"``: the CLI's command table, the provider table).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "tether"

# Top to bottom. A module belongs to the first entry that is it or one of its packages.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tether", "tether.__main__", "tether.api", "tether.cli", "tether.web", "tether.modelserver"),
    # the daemon: its composition root, then its parts, each above what it uses
    ("tether.daemon.app",),
    ("tether.daemon.hosts",),  # many hosts: a link to the cluster, runs on other hosts
    ("tether.daemon.channels",),  # channel.*, and channels wired to agents
    ("tether.daemon.pty",),  # PTY agents and agent.drive: a family of the fleet
    ("tether.daemon.fleet",),  # the fleet interface, the verbs, the wire agents
    ("tether.daemon.rpc", "tether.daemon"),  # the socket server, protocol and clients
    # the runtime: the parent's side drives what the child's side runs
    ("tether.runtime.parent",),
    ("tether.runtime.child", "tether.runtime"),
    ("tether.agent",),
    ("tether.inbox", "tether.store", "tether.workspace"),
    ("tether.display",),
    ("tether.transports",),
    ("tether.wire", "tether.framing", "tether.policy"),
    # the base: small helpers every layer may use
    (
        "tether.errors",
        "tether.exits",
        "tether.fsafe",
        "tether.jsondepth",
        "tether.numbers",
        "tether.paths",
        "tether.peercred",
        "tether.procs",
        "tether.reaper",
        "tether.sched",
    ),
)

# Deliberate exceptions, each (importer, imported): why it must point up. Keep it empty.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports_by_name(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Attribute | ast.Name)
        and (node.attr if isinstance(node, ast.Attribute) else node.id) == "import_module"
        for node in ast.walk(tree)
    )


def _targets(importer: str, tree: ast.AST) -> Iterator[str]:
    by_name = _imports_by_name(tree)  # then its module-name strings are imports too
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(importer, node)
            for alias in node.names:
                child = f"{module}.{alias.name}"
                yield child if child in MODULES else module
        elif by_name and isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.partition(":")[0]  # "module:attr" in tables
            if name != importer and name in MODULES and name.startswith("tether."):
                yield name


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {t for t in _targets(name, tree) if t in MODULES and t != name}
    return graph


GRAPH = _graph()


def layer_of(module: str) -> int:
    """The layer of the longest package in LAYERS that is ``module`` or contains it."""
    owners = [
        (len(package), index)
        for index, packages in enumerate(LAYERS)
        for package in packages
        if module == package or (package != "tether" and module.startswith(package + "."))
    ]
    if not owners:
        raise LookupError(module)
    return max(owners)[1]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_module_has_a_layer() -> None:
    missing = []
    for module in MODULES:
        try:
            layer_of(module)
        except LookupError:
            missing.append(module)
    assert not missing, f"add these to LAYERS in tests/test_imports.py: {missing}"


def test_no_import_cycles() -> None:
    cycles = _cycles(GRAPH)
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_imports_point_down() -> None:
    upward = [
        f"{importer} -> {imported}"
        for importer, targets in sorted(GRAPH.items())
        for imported in sorted(targets)
        if layer_of(imported) < layer_of(importer) and (importer, imported) not in EXCEPTIONS
    ]
    assert upward == [], "\n".join(upward)


def _third_party(tree: ast.AST) -> Iterator[str]:
    """The top-level names of what ``tree`` imports, absolute imports only."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.partition(".")[0]


def test_nats_is_imported_only_by_the_jetstream_transport() -> None:
    # every other part reaches a cluster through tether.transports.cluster's interface
    importers = sorted(
        name
        for name, path in MODULES.items()
        if "nats" in _third_party(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert importers == ["tether.transports.jetstream"]


def test_the_jetstream_transport_is_chosen_only_by_url() -> None:
    # tether.transports.opener picks it by scheme; nothing names it to import it
    jetstream = "tether.transports.jetstream"
    importers = sorted(name for name, targets in GRAPH.items() if jetstream in targets)
    assert importers == ["tether.transports.opener"]


def test_the_walker_sees_lazy_imports_and_tables() -> None:
    # the checks above are only as good as the graph: known edges of each kind are in it
    assert "tether.runtime.parent.spawn" in GRAPH["tether.api"]  # module level
    assert "tether.inbox.writer" in GRAPH["tether.agent.report"]  # inside a function
    assert "tether.cli.run" in GRAPH["tether.cli"]  # a string in the command table
    assert "tether.agent.providers.anthropic" in GRAPH["tether.agent.registry"]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_cycle_finder_finds_cycles(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert _cycles(graph) == expected
