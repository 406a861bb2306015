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
4. no cycle between the modules of one unit, except the cycles listed in ``KNOWN_MODULE_CYCLES``;
5. a module under ``fedhet.lab`` imports the library only through its entrances (``ENTRANCES``,
   ``MODULE_ENTRANCES``), and from an entrance package only the names of its ``__all__``;
6. every name in an entrance's ``__all__`` is defined and imported from the entrance by a module
   outside its package (no dead export);
7. no ``_name`` is imported from another module (``from x import _y``; dunder names are not private).
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import subprocess
import sys
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

# The lab's door into the library (docs/design.md, "Layers"): the only library modules a module under
# fedhet.lab imports from, with no exception. Each package declares ``__all__`` (its names are imported
# on first use) and the lab imports only those; the top-level core modules are one file each, imported
# by name. Both lists are exact: an entrance the lab no longer uses fails the test.
ENTRANCES = ("fedhet.engine", "fedhet.config", "fedhet.core")
MODULE_ENTRANCES = ("fedhet.errors", "fedhet.error_lines", "fedhet.names", "fedhet.presets")


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


def _from_base(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a ``from ... import`` in ``module`` imports from."""
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if MODULES[module].name != "__init__.py":
        package = package[:-1]
    package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The fedhet modules (or packages) one import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "fedhet"]
    base = _from_base(module, node)
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


def _import_nodes() -> list[tuple[str, ast.Import | ast.ImportFrom]]:
    """Every import statement of src/fedhet, with its module."""
    return [(module, node) for module, path in MODULES.items()
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
            if isinstance(node, (ast.Import, ast.ImportFrom))]


IMPORTS = _import_nodes()


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


def _is_lab(module: str) -> bool:
    return module == "fedhet.lab" or module.startswith("fedhet.lab.")


def _door_broken(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Rule 5 on one import statement of ``module``: its imports of the library that do not go through
    an entrance, or take a name the entrance does not export."""
    if not _is_lab(module):
        return []
    where = f"{module}:{node.lineno}"
    if isinstance(node, ast.Import):
        return [f"{where} imports {alias.name}: the lab writes `from <entrance> import <name>`"
                for alias in node.names if alias.name.split(".")[0] == "fedhet" and not _is_lab(alias.name)]
    base = _from_base(module, node)
    if base.split(".")[0] != "fedhet" or _is_lab(base) or base in MODULE_ENTRANCES:
        return []
    if base not in ENTRANCES:
        return [f"{where} imports from {base}: the lab enters the library only through "
                + ", ".join(ENTRANCES + MODULE_ENTRANCES)]
    exported = importlib.import_module(base).__all__
    return [f"{where} imports {alias.name} from {base}, which is not in its __all__"
            for alias in node.names if alias.name not in exported]


def _private_import(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Rule 7 on one import statement of ``module``: the ``_names`` it imports from another module."""
    if not isinstance(node, ast.ImportFrom) or _from_base(module, node) == module:
        return []
    return [f"{module}:{node.lineno} imports {alias.name} from {_from_base(module, node)}"
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def _entrance_uses() -> dict[str, set[str]]:
    """Entrance package -> the names that modules outside it import from it."""
    uses: dict[str, set[str]] = {entrance: set() for entrance in ENTRANCES}
    for module, node in IMPORTS:
        if isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            if base in uses and _unit(module) != base:
                uses[base].update(alias.name for alias in node.names)
    return uses


def _export_problems(entrance: str, exported: list[str], used: set[str]) -> list[str]:
    """Rule 6 on an entrance's ``__all__``: names it does not define, and names nobody outside imports."""
    package = importlib.import_module(entrance)
    problems = []
    for name in exported:
        if not hasattr(package, name):
            problems.append(f"{entrance}.__all__ names {name}, which {entrance} does not define")
        if name not in used:
            problems.append(f"{entrance}.__all__ names {name}, which no module outside {entrance} imports from it")
    return problems


def test_the_lab_enters_the_library_through_the_entrances():
    broken = [message for module, node in IMPORTS for message in _door_broken(module, node)]
    assert not broken, "the lab's imports of the library (docs/design.md, \"Layers\"):\n" + "\n".join(broken)
    entered = {_from_base(module, node) for module, node in IMPORTS
               if _is_lab(module) and isinstance(node, ast.ImportFrom)}
    unused = sorted(set(ENTRANCES + MODULE_ENTRANCES) - entered)
    assert not unused, f"ENTRANCES or MODULE_ENTRANCES lists modules the lab never imports; remove them: {unused}"


def test_every_export_of_an_entrance_is_defined_and_used():
    uses = _entrance_uses()
    problems = [problem for entrance in ENTRANCES
                for problem in _export_problems(entrance, importlib.import_module(entrance).__all__, uses[entrance])]
    assert not problems, "\n".join(problems)


def _declared_exports(entrance: str) -> tuple[dict[str, str], dict[str, str]]:
    """An entrance's ``__init__.py``: (its ``_EXPORTS`` table, the names its TYPE_CHECKING block imports
    -> their modules)."""
    package = importlib.import_module(entrance)
    tree = ast.parse(MODULES[entrance].read_text())
    checked = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    checked.update({alias.name: inner.module or "" for alias in inner.names})
    return dict(package._EXPORTS), checked


@pytest.mark.parametrize("entrance", ENTRANCES)
def test_an_entrance_names_each_export_once_in_its_table_its_type_imports_and_all(entrance):
    """``__all__``, the lazy table and the TYPE_CHECKING imports list the same names from the same
    modules, and a name resolves to the object its module defines."""
    package = importlib.import_module(entrance)
    table, checked = _declared_exports(entrance)
    assert len(package.__all__) == len(set(package.__all__)), f"{entrance}.__all__ lists a name twice"
    assert set(package.__all__) == set(table), f"{entrance}: __all__ and _EXPORTS differ"
    assert checked == table, f"{entrance}: the TYPE_CHECKING imports and _EXPORTS differ"
    for name, module in table.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name)


def test_importing_the_entrances_imports_none_of_their_modules():
    """The exports are imported on first use (PEP 562): the entrances cost no more than ``import fedhet``."""
    code = ("import sys, fedhet; before = set(sys.modules); import fedhet.engine, fedhet.config, fedhet.core; "
            "print(sorted(set(sys.modules) - before - {'fedhet.engine'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": ""}).stdout
    assert out.strip() == "[]"


def test_no_private_name_is_imported_from_another_module():
    broken = [message for module, node in IMPORTS for message in _private_import(module, node)]
    assert not broken, ("private names imported across modules (make them public under a name that says what "
                        "they are):\n" + "\n".join(broken))


@pytest.mark.parametrize("source, module, broken", [
    ("from fedhet.engine.runner import run_experiment\n", "fedhet.lab.sweep.worker", "only through"),
    ("def f():\n    from fedhet.backends.ray_backend import check_reachable\n", "fedhet.lab.sweep.plan",
     "only through"),
    ("import fedhet.engine.runner\n", "fedhet.lab.report.runs", "from <entrance> import"),
    ("from fedhet.engine import RunHandle\n", "fedhet.lab.claims.pilot", "not in its __all__"),
    ("from fedhet.engine import checkpoint\n", "fedhet.lab.claims.pilot", "not in its __all__"),
    ("from fedhet.engine import run_experiment\n", "fedhet.lab.sweep.worker", None),
    ("from fedhet.errors import FedhetError\n", "fedhet.lab.sweep.grid", None),
    ("from fedhet.lab.sweep.grid import SweepError\n", "fedhet.lab.claims.pilot", None),
    ("from fedhet.engine.runner import run_experiment\n", "fedhet.flower.commands", None),
])
def test_the_door_rule_catches_a_planted_import(source, module, broken):
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom)))
    messages = _door_broken(module, node)
    if broken is None:
        assert messages == []
    else:
        assert len(messages) == 1 and broken in messages[0] and messages[0].startswith(f"{module}:")


def test_the_export_rule_catches_a_planted_export():
    assert _export_problems("fedhet.engine", ["run_experiment"], {"run_experiment"}) == []
    [undefined, unused] = _export_problems("fedhet.engine", ["no_such_name"], set())
    assert "does not define" in undefined and "no module outside" in unused
    [unused] = _export_problems("fedhet.engine", ["resume_run"], {"run_experiment"})
    assert "resume_run" in unused and "no module outside fedhet.engine" in unused


@pytest.mark.parametrize("source, module, broken", [
    ("from fedhet.config.schema import _toml_string\n", "fedhet.lab.tuning.results", True),
    ("from .tables import _helper\n", "fedhet.lab.report.client_report", True),
    ("from torch._C import _get_tracing_state\n", "fedhet.core.params", True),
    ("from fedhet.config.schema import toml_literal\n", "fedhet.lab.tuning.results", False),
    ("from fedhet.core.options import __all__\n", "fedhet.config.schema", False),
])
def test_the_private_name_rule_catches_a_planted_import(source, module, broken):
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom))
    messages = _private_import(module, node)
    assert len(messages) == (1 if broken else 0)
