"""The growth report of scripts/lint.sh (docs/design.md, "A guard on growth"): files and lines per package of
src/fedhet, the library's packages and the lab's (src/fedhet/lab/*) apart, and the copy-pasted blocks that
pylint's duplicate-code check (R0801) finds in src/fedhet.

The duplicate check reads its settings from pyproject.toml ([tool.pylint.similarities]: more than 6 alike
lines, imports, docstrings, comments and signatures ignored) and compares its count with the committed
baseline, pyproject.toml [tool.fedhet.growth] duplicate-code-blocks. The exit status is 1 when the count is
above the baseline (a new duplicate: factor it out, or raise the baseline in the same commit and say why),
0 otherwise; a count below the baseline prints the lower number to commit.

Usage: python scripts/growth.py [--out FILE.json] [--no-duplicates]
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import re
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "fedhet"
LAB = PACKAGE / "lab"


def _lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def _count(files: list[Path]) -> dict[str, int]:
    return {"files": len(files), "lines": sum(_lines(path) for path in files)}


def package_sizes(top: Path, skip: frozenset[str] = frozenset()) -> dict[str, dict[str, int]]:
    """Files and lines (``*.py``) of each package directly under ``top`` (its whole subtree), and of ``top``'s
    own modules under ``(modules)``; ``skip`` names packages left out."""
    sizes = {}
    for child in sorted(top.iterdir()):
        if child.is_dir() and child.name not in skip and (child / "__init__.py").exists():
            sizes[child.name] = _count(sorted(child.rglob("*.py")))
    sizes["(modules)"] = _count(sorted(top.glob("*.py")))
    return sizes


def _total(sizes: dict[str, dict[str, int]]) -> dict[str, int]:
    return {key: sum(size[key] for size in sizes.values()) for key in ("files", "lines")}


def _similarity_settings() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["pylint"]["similarities"]


# The report of pylint's Symilar: "N similar lines in K files", then one "==NAME:[start:end]" line per
# file (0-based start, end exclusive), then the lines themselves, and a TOTAL line.
_PLACE = re.compile(r"^==(?P<name>.+):\[(?P<start>\d+):(?P<end>\d+)\]$")


def duplicate_blocks() -> list[list[str]]:
    """The duplicate-code blocks in src/fedhet, each as its places ``path:first-last``: pylint's own
    similarity checker (the R0801 duplicate-code check of ``pylint --disable=all --enable=duplicate-code``),
    with pyproject.toml's [tool.pylint.similarities]. Each file's astroid tree is only the syntax tree
    (astroid's TreeRebuilder over ``ast.parse``): the checker needs only where imports and signatures stand,
    while a full astroid build infers (following every import, torch's included) and made a plain pylint run
    take minutes of CPU."""
    from astroid.manager import AstroidManager
    from astroid.rebuilder import TreeRebuilder
    from pylint.checkers.symilar import Symilar

    settings = _similarity_settings()
    checker = Symilar(min_lines=int(settings["min-similarity-lines"]),
                      ignore_comments=bool(settings["ignore-comments"]),
                      ignore_docstrings=bool(settings["ignore-docstrings"]),
                      ignore_imports=bool(settings["ignore-imports"]),
                      ignore_signatures=bool(settings["ignore-signatures"]))
    manager = AstroidManager()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        tree = TreeRebuilder(manager, text).visit_module(ast.parse(text, type_comments=True), name, str(path),
                                                         path.name == "__init__.py")
        checker.append_stream(name, io.StringIO(text), tree=tree)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        checker.run()
    blocks: list[list[str]] = []
    for line in printed.getvalue().splitlines():
        if re.match(r"^\d+ similar lines in \d+ files$", line):
            blocks.append([])
        elif (place := _PLACE.match(line)) is not None:
            blocks[-1].append(f"{place['name']}:{int(place['start']) + 1}-{place['end']}")
    return sorted(blocks)


def _baseline() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return int(config["tool"]["fedhet"]["growth"]["duplicate-code-blocks"])


def _print_sizes(title: str, sizes: dict[str, dict[str, int]], total: dict[str, int]) -> None:
    print(f"  {title}")
    for name, size in sizes.items():
        print(f"    {name:<24}{size['files']:>6}{size['lines']:>9,}")
    print(f"    {'total':<24}{total['files']:>6}{total['lines']:>9,}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Files and lines per package of src/fedhet, and its "
                                                 "duplicate-code blocks against the baseline.")
    parser.add_argument("--out", type=Path, help="also write the report to this JSON file")
    parser.add_argument("--no-duplicates", action="store_true", help="only the sizes (no pylint run)")
    args = parser.parse_args(argv)

    library = package_sizes(PACKAGE, skip=frozenset({"lab"}))
    lab = package_sizes(LAB)
    report: dict = {"library": library, "library_total": _total(library), "lab": lab, "lab_total": _total(lab)}
    report["total"] = {key: report["library_total"][key] + report["lab_total"][key] for key in ("files", "lines")}
    print("growth: files and lines (*.py) per package of src/fedhet")
    print(f"    {'package':<24}{'files':>6}{'lines':>9}")
    _print_sizes("library (src/fedhet; (modules): its top-level modules)", library, report["library_total"])
    _print_sizes("lab (src/fedhet/lab)", lab, report["lab_total"])
    print(f"    {'src/fedhet':<24}{report['total']['files']:>6}{report['total']['lines']:>9,}")

    status = 0
    if not args.no_duplicates:
        started = time.monotonic()
        blocks = duplicate_blocks()
        baseline = _baseline()
        report["duplicate_code"] = {"blocks": blocks, "count": len(blocks), "baseline": baseline}
        print(f"growth: {len(blocks)} duplicate-code block(s) in src/fedhet (pylint R0801, pyproject.toml "
              f"[tool.pylint.similarities]; {time.monotonic() - started:.0f} s); baseline {baseline} "
              "(pyproject.toml [tool.fedhet.growth])")
        for number, places in enumerate(blocks, 1):
            print(f"  {number:>3}. " + "  ".join(places))
        if len(blocks) > baseline:
            print(f"growth: {len(blocks)} duplicate-code blocks, more than the baseline {baseline}: factor the new "
                  "copy out, or raise duplicate-code-blocks in pyproject.toml in the same commit and say why",
                  file=sys.stderr)
            status = 1
        elif len(blocks) < baseline:
            print(f"growth: fewer duplicate-code blocks than the baseline: set duplicate-code-blocks = {len(blocks)} "
                  "in pyproject.toml [tool.fedhet.growth]", file=sys.stderr)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
