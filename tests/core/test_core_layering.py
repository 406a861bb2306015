"""The package layering of docs/design.md, "Layers", checked on every ``import`` in src/fedhet.

Every ``import``/``from ... import`` statement is read with :mod:`ast`, wherever it stands: at module
level, inside a function (a lazy import), or under ``if TYPE_CHECKING:``. A lazy import is still a
dependency of the design (it only postpones it), so it obeys the same rules; an exception would have
to be listed in ``KNOWN_VIOLATIONS`` with its reason. A package's ``__init__`` running when one of
its modules is imported is not an edge: only what a module names counts.

A *unit* is a subpackage of fedhet (``fedhet.engine``) or a top-level module (``fedhet.errors``);
``fedhet`` itself is its ``__init__``, the public facade. The rules:

1. a unit imports only units of its own layer or of a lower one (no upward import);
2. in a layer marked independent (the stages), a unit imports no other unit of that layer;
3. no cycle between units;
4. no cycle between the modules of one unit, except the cycles listed in ``KNOWN_MODULE_CYCLES``.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# Lowest first: (name, units, independent). A unit not listed here fails the test, so a new
# package has to be placed deliberately.
LAYERS: list[tuple[str, frozenset[str], bool]] = [
    ("core", frozenset({"fedhet.core", "fedhet.errors", "fedhet.names", "fedhet.logs", "fedhet.error_lines",
                        "fedhet.presets"}), False),
    ("stages", frozenset({"fedhet.data", "fedhet.models", "fedhet.participation", "fedhet.client",
                          "fedhet.server", "fedhet.tracking", "fedhet.system"}), True),
    ("backends", frozenset({"fedhet.backends"}), False),
    ("algorithms", frozenset({"fedhet.algorithms"}), False),
    ("config", frozenset({"fedhet.components", "fedhet.config"}), False),
    ("engine", frozenset({"fedhet.engine"}), False),
    ("applications", frozenset({"fedhet.problems", "fedhet.flower", "fedhet.testing"}), False),
    # The lab (src/fedhet/lab): the reproduction apparatus built on the library.
    ("lab: sweeps", frozenset({"fedhet.lab", "fedhet.lab.sweep"}), False),
    ("lab: reports", frozenset({"fedhet.lab.report"}), False),
    ("lab: studies", frozenset({"fedhet.lab.claims", "fedhet.lab.tuning"}), False),
    ("lab: commands", frozenset({"fedhet.lab.commands"}), False),
    ("entry points", frozenset({"fedhet.cli", "fedhet"}), False),
]

# Module-level edges (importer, imported) that break a rule today, each with the reason it exists.
# The list is exact: an edge that no longer breaks a rule fails the test until it is removed here.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}

# Cycles between the modules of one package (as sorted tuples), each with its reason; exact too.
KNOWN_MODULE_CYCLES: dict[tuple[str, ...], str] = {}


@dataclasses.dataclass(frozen=True)
class Edge:
    importer: str        # module
    imported: str        # module (or package)
    line: int
    lazy: bool           # inside a function or a class body, not at module level

    def where(self) -> str:
        return f"{self.importer}:{self.line}" + (" (lazy import)" if self.lazy else "")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted((SRC / "fedhet").rglob("*.py"))}


def _unit(module: str) -> str:
    """``fedhet.engine.runner`` -> ``fedhet.engine``; ``fedhet.lab.sweep.plan`` -> ``fedhet.lab.sweep``;
    ``fedhet.errors`` -> itself; ``fedhet`` -> itself."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["lab"] else parts[:2])


def _layer_of(unit: str) -> int:
    for index, (_, units, _) in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"{unit} is in no layer of tests/core/test_core_layering.py; place it in LAYERS "
                         "(and in docs/design.md, \"Layers\")")


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The fedhet modules (or packages) one import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "fedhet"]
    if node.level:
        package = module.split(".")
        if MODULES[module].name != "__init__.py":
            package = package[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base.split(".")[0] != "fedhet":
        return []
    # ``from fedhet.engine import checkpoint`` names the module fedhet.engine.checkpoint.
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
    return submodules if len(submodules) == len(node.names) else [base] + submodules


def _edges() -> list[Edge]:
    edges = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        top_level = {id(node) for node in tree.body}
        top_level |= {id(inner) for node in tree.body if isinstance(node, (ast.If, ast.Try))
                      for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node):
                    if target != module:
                        edges.append(Edge(module, target, node.lineno, id(node) not in top_level))
    return edges


EDGES = _edges()


def _rule_broken(edge: Edge) -> str | None:
    source, target = _unit(edge.importer), _unit(edge.imported)
    if source == target:
        return None
    source_layer, target_layer = _layer_of(source), _layer_of(target)
    if target_layer > source_layer:
        return (f"{edge.where()} imports {edge.imported}: layer {LAYERS[source_layer][0]!r} may not import "
                f"layer {LAYERS[target_layer][0]!r} above it")
    if target_layer == source_layer and LAYERS[source_layer][2]:
        return (f"{edge.where()} imports {edge.imported}: {source} and {target} are both in layer "
                f"{LAYERS[source_layer][0]!r}, whose units import only lower layers")
    return None


def _cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _cycle_lines(members: tuple[str, ...], edges: list[Edge], key) -> str:
    inside = [e for e in edges if key(e.importer) in members and key(e.imported) in members
              and key(e.importer) != key(e.imported)]
    return "\n".join(f"    {e.where()} imports {e.imported}" for e in inside)


def test_every_unit_is_in_a_layer():
    units = {_unit(m) for m in MODULES}
    for unit in sorted(units):
        _layer_of(unit)
    listed = set().union(*(units_ for _, units_, _ in LAYERS))
    # fedhet.algorithms is placed ahead of the package that pairs client and server halves.
    stale = sorted(listed - units - {"fedhet.algorithms"})
    assert not stale, f"LAYERS names units that do not exist: {stale}"


def test_imports_go_down_the_layers():
    broken = {}
    for edge in EDGES:
        message = _rule_broken(edge)
        if message and (edge.importer, edge.imported) not in KNOWN_VIOLATIONS:
            broken.setdefault((edge.importer, edge.imported), message)
    assert not broken, "imports that break the layering (docs/design.md, \"Layers\"):\n" + "\n".join(
        sorted(broken.values()))


def test_known_violations_are_exact():
    breaking = {(e.importer, e.imported) for e in EDGES if _rule_broken(e)}
    gone = sorted(set(KNOWN_VIOLATIONS) - breaking)
    assert not gone, ("KNOWN_VIOLATIONS lists edges that no longer break the layering; remove them: "
                      + ", ".join(f"{a} -> {b}" for a, b in gone))


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for edge in EDGES:
        source, target = _unit(edge.importer), _unit(edge.imported)
        if source != target:
            graph.setdefault(source, set()).add(target)
    cycles = _cycles(graph)
    assert not cycles, "import cycles between packages:\n" + "\n".join(
        " <-> ".join(c) + "\n" + _cycle_lines(c, EDGES, _unit) for c in cycles)


def _module_cycles() -> list[tuple[str, ...]]:
    """Cycles between the modules of one unit (its subpackages included)."""
    graph: dict[str, set[str]] = {}
    for edge in EDGES:
        if edge.imported in MODULES and _unit(edge.importer) == _unit(edge.imported):
            graph.setdefault(edge.importer, set()).add(edge.imported)
    return _cycles(graph)


def test_no_cycle_between_modules_of_a_package():
    cycles = [c for c in _module_cycles() if c not in KNOWN_MODULE_CYCLES]
    assert not cycles, "import cycles between modules:\n" + "\n".join(
        " <-> ".join(c) + "\n" + _cycle_lines(c, EDGES, lambda m: m) for c in cycles)


def test_known_module_cycles_are_exact():
    gone = sorted(set(KNOWN_MODULE_CYCLES) - set(_module_cycles()))
    assert not gone, f"KNOWN_MODULE_CYCLES lists cycles that no longer exist; remove them: {gone}"


@pytest.mark.parametrize("source, expected", [
    ("from fedhet.engine.simulator import Simulator\n", "upward"),
    ("def f():\n    from fedhet.server.base import compose\n", "same layer"),
    ("from fedhet.core.params import ParamSpec\n", None),
])
def test_the_rules_catch_a_planted_import(source, expected):
    """The checker itself: an import planted in a stage module is judged as the rules say."""
    module = "fedhet.participation.base"
    tree = ast.parse(source)
    node = next(n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    [target] = _targets(module, node)
    message = _rule_broken(Edge(module, target, node.lineno, lazy=False))
    if expected is None:
        assert message is None
    else:
        assert message is not None and "fedhet.participation.base:" in message
        assert ("above it" in message) == (expected == "upward")


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]


def _drawn_layers() -> list[tuple[str, str]]:
    """docs/design.md, "Layers": the drawing's rows top to bottom, each (layer name, its text)."""
    text = (SRC.parent / "docs" / "design.md").read_text()
    section = text[text.index("\n## Layers\n"):]
    drawing = section.split("```")[1]
    rows: list[tuple[str, str]] = []
    for line in drawing.splitlines():
        label, body = line[:15].strip(), line[15:]
        if label.startswith("="):               # a rule between library and lab, not a layer
            continue
        if label and label != "|":              # a layer's first line: its name in the left column
            rows.append((label, body))
        elif rows:
            rows[-1] = (rows[-1][0], rows[-1][1] + " " + body)
    return rows


def test_the_design_drawing_shows_every_layer_and_unit():
    """The drawing lists the layers of ``LAYERS`` top down and names each unit in its own layer's row."""
    rows = _drawn_layers()
    assert [name for name, _ in rows] == [name for name, _, _ in reversed(LAYERS)], (
        "docs/design.md, \"Layers\": the drawing's layers differ from LAYERS (top down)")
    missing = []
    for (name, body), (_, units, _) in zip(rows, reversed(LAYERS)):
        for unit in sorted(units):
            short = unit if unit == "fedhet" else unit.removeprefix("fedhet.")
            if not re.search(rf"(?<![\w.])(?:fedhet\.)?{re.escape(short)}(?!\w)", body):
                missing.append(f"{unit} (layer {name!r})")
    assert not missing, "docs/design.md, \"Layers\": the drawing does not name " + ", ".join(missing)
