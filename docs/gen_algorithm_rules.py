"""Generates the rows of the rule tables of docs/algorithms.md from the registered modules' docstrings.

Each rule is written once in the code, in the docstring of the module that registers the method
(``src/fedhet/algorithms/<paper>.py``; docs/design.md, "Adding an algorithm"), as a block::

    Rule table <table-id>:
        | <Name (Author Year)> | <column 2> | <column 3> |

``<table-id>`` is ``server`` (section 2, "name | aggregation G | server state and step") or ``local``
(section 5, "name | local step | after local training / upload"). A row starts on a line indented four
spaces with ``|``; a line indented eight spaces continues the row above (joined with one space), so a
long rule keeps the docstring's line length. A module may hold several rows and both tables.

The modules are found by walking the registries, not a package: every module that defines a
registered local solver or server method (``inspect.getmodule(entry.factory)``), once, in the order
of the import lines of ``src/fedhet/components.py`` (the one registry line per module). So a method
whose registration moves to another module keeps its row without a change here.

The page keeps the tables' header rows; between ``<!-- rules:<id> -->`` and ``<!-- /rules:<id> -->``
everything after the header and its ``| --- |`` line is generated. Used as a script::

    python docs/gen_algorithm_rules.py            # rewrite docs/algorithms.md
    python docs/gen_algorithm_rules.py --check    # exit 1, with a one-line hint, when the page is stale

``--page PATH`` names another copy of the page (the tests use one).
"""
from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PAGE = ROOT / "docs" / "algorithms.md"
TABLES = ("server", "local")
_BLOCK_START = re.compile(r"^Rule table (?P<table>[\w-]+):\s*$")
_ROW_INDENT = " " * 4
_CONTINUATION_INDENT = " " * 8


def _import_fedhet():
    # The docs are built from a checkout: import its src/ even when fedhet is not installed.
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    import fedhet.components
    from fedhet.core.registry import CLIENT_SOLVERS, SERVERS

    return fedhet.components, (CLIENT_SOLVERS, SERVERS)


def rule_rows(docstring: str | None, where: str = "docstring") -> dict[str, list[str]]:
    """``{table id: [row, ...]}`` of the ``Rule table <id>:`` blocks of ``docstring``, rows in order.

    Raises ``ValueError`` naming ``where`` for a block without rows or a row that is not ``| ... |``."""
    rows: dict[str, list[str]] = {}
    lines = inspect.cleandoc(docstring or "").splitlines()
    index = 0
    while index < len(lines):
        match = _BLOCK_START.match(lines[index])
        index += 1
        if not match:
            continue
        table, block = match.group("table"), []
        while index < len(lines) and lines[index].startswith(_ROW_INDENT):
            line = lines[index]
            if line.startswith(_CONTINUATION_INDENT):
                if not block:
                    raise ValueError(f"{where}: rule table {table!r} starts with a continuation line: {line.strip()!r}")
                block[-1] += " " + line.strip()
            else:
                block.append(line.strip())
            index += 1
        if not block:
            raise ValueError(f"{where}: rule table {table!r} has no rows (each row is indented four spaces)")
        for row in block:
            if not (row.startswith("| ") and row.endswith(" |")):
                raise ValueError(f"{where}: a row of rule table {table!r} must read '| ... |', got {row!r}")
        rows.setdefault(table, []).extend(block)
    return rows


def _components_order(components: ModuleType) -> list[str]:
    """The modules imported by ``components.py``, in the order of its lines."""
    tree = ast.parse(Path(components.__file__).read_text(encoding="utf-8"))
    return [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]


def registered_modules() -> list[ModuleType]:
    """Every module defining a registered local solver or server method, once, in components order."""
    components, registries = _import_fedhet()
    found: dict[str, ModuleType] = {}
    for registry in registries:
        for name in registry.names():
            module = inspect.getmodule(registry.get(name).factory)
            if module is not None:
                found.setdefault(module.__name__, module)
    order = _components_order(components)
    position = {name: index for index, name in enumerate(order)}
    # A module that components.py does not import itself (imported by another) goes last, by name.
    return sorted(found.values(), key=lambda module: (position.get(module.__name__, len(order)), module.__name__))


def table_rows() -> dict[str, list[str]]:
    """``{table id: rows}`` for every table of :data:`TABLES`, from the registered modules."""
    rows: dict[str, list[str]] = {table: [] for table in TABLES}
    for module in registered_modules():
        for table, found in rule_rows(module.__doc__, where=module.__name__).items():
            if table not in rows:
                raise ValueError(f"{module.__name__}: unknown rule table {table!r}; allowed: {', '.join(TABLES)}")
            rows[table].extend(found)
    return rows


def render(page: str, rows: dict[str, list[str]]) -> str:
    """``page`` with the rows between each table's markers replaced by ``rows[table]``."""
    for table, table_rows_ in rows.items():
        start, end = f"<!-- rules:{table} -->", f"<!-- /rules:{table} -->"
        if page.count(start) != 1 or page.count(end) != 1 or page.index(start) > page.index(end):
            raise ValueError(f"the page needs exactly one {start} ... {end} pair around the {table!r} table")
        head, rest = page.split(start, 1)
        body, tail = rest.split(end, 1)
        header = [line for line in body.splitlines() if line.startswith("|")][:2]
        if len(header) != 2 or not re.fullmatch(r"\|(\s*-+\s*\|)+", header[1].replace(" ", "")):
            raise ValueError(f"the {table!r} table needs its header row and its '| --- |' line inside {start}")
        page = head + start + "\n\n" + "\n".join(header + table_rows_) + "\n\n" + end + tail
    return page


def first_difference(current: str, wanted: str) -> str:
    """A one-line hint: the first line where the page differs from what the code generates."""
    have, want = current.splitlines(), wanted.splitlines()
    for number, (old, new) in enumerate(zip(have, want), start=1):
        if old != new:
            return f"line {number}: page has {old[:70]!r}, the docstrings give {new[:70]!r}"
    return f"the page has {len(have)} lines, the docstrings give {len(want)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the rule tables of docs/algorithms.md.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale; write nothing")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page to check or rewrite")
    args = parser.parse_args(argv)
    current = args.page.read_text(encoding="utf-8")
    try:
        wanted = render(current, table_rows())
    except ValueError as error:
        print(f"gen_algorithm_rules: {error}", file=sys.stderr)
        return 2
    if args.check:
        if current != wanted:
            print(f"{args.page}: the rule tables are stale ({first_difference(current, wanted)}); "
                  "run python docs/gen_algorithm_rules.py", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        from fedhet.core.io import atomic_write_text

        atomic_write_text(args.page, wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
