#!/usr/bin/env bash
# Lints fedhet (sets itself up first, like scripts/test.sh): ruff on src and tests (pyproject.toml
# [tool.ruff]: import order, pyflakes, complexity at most 15), pyright in basic mode on src/fedhet
# ([tool.pyright]) and the growth report (scripts/growth.py: files and lines per package, duplicate code
# against its baseline). All three always run; the exit status is 1 when any finds something.
# Usage: bash scripts/lint.sh [--fix]   (--fix: ruff first sorts imports and removes unused ones)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
venv=".venv"
fix=()
[ "${1:-}" = "--fix" ] && fix=(--fix)
status=0
echo "lint: ruff check src tests" >&2
"$venv/bin/ruff" check "${fix[@]}" src tests || status=1
echo "lint: pyright (basic) on src/fedhet" >&2
# --project .: this repository's [tool.pyright] (else pyright takes the first pyrightconfig.json of
# a parent folder). The venv's python: pyright resolves torch and the optional integrations where the
# dev extras put them. PYRIGHT_PYTHON_IGNORE_WARNINGS: no look-up of a newer pyright on PyPI (pinned).
PYRIGHT_PYTHON_IGNORE_WARNINGS=1 "$venv/bin/pyright" --project . --pythonpath "$venv/bin/python" || status=1
echo "lint: growth report (scripts/growth.py)" >&2
"$venv/bin/python" scripts/growth.py || status=1
exit "$status"
