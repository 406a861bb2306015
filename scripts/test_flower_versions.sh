#!/usr/bin/env bash
# Runs the Flower bridge's tests (tests/flower/: the in-process and loopback federations, bitwise
# against `fedhet run`) on every Flower minor version the `flower` extra allows, each in its own venv
# (.venv-flwr<version>, torch==2.13.0 first: an unpinned torch would pull gigabytes of CUDA).
# Usage: bash scripts/test_flower_versions.sh [1.41 1.42 ...]   (default: flwr_compat.CHECKED_ON)
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  read -r -a versions <<< "$(python3 -c "
import re; text = open('src/fedhet/flower/flwr_compat.py').read()
print(' '.join(re.findall(r'\"(\d+\.\d+)\"', re.search(r'CHECKED_ON = \(([^)]*)\)', text).group(1))))")"
fi
# The suite (scripts/test.sh) has already run tests/flower in .venv on the Flower that resolved there: that
# version is not installed and tested a second time.
main_version="$(.venv/bin/python -c "import flwr; print(flwr.__version__)" 2>/dev/null || true)"
for version in "${versions[@]}"; do
  case "$main_version" in
    "$version".*) echo "test_flower_versions: Flower $main_version ran with the suite in .venv" >&2; continue ;;
  esac
  venv=".venv-flwr$version"
  py="$venv/bin/python"
  stamp="$venv/.fedhet-installed-flwr"
  [ -x "$py" ] || python3 -m venv "$venv"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "test_flower_versions: installing torch==2.13.0, fedhet[dev] and Flower $version.* into $venv" >&2
    "$py" -m pip install -q --disable-pip-version-check "torch==2.13.0" "numpy>=1.24" 2>&1 | grep -v "^WARNING: Location" || true
    "$py" -m pip install -q --disable-pip-version-check -e ".[dev]" "flwr[simulation]==$version.*" 2>&1 \
      | grep -v "^WARNING: Location" || true
    touch "$stamp"
  fi
  installed="$("$py" -c "import flwr; print(flwr.__version__)")"
  case "$installed" in
    "$version".*) ;;
    *) echo "test_flower_versions: $venv has Flower $installed, not $version" >&2; exit 1 ;;
  esac
  echo "test_flower_versions: tests/flower on Flower $installed" >&2
  "$py" -m pytest tests/flower -q
done
