#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: the Fashion-MNIST package, a virtual environment with
# torch==2.13.0 (the local CPU wheel; an unpinned torch would pull gigabytes of CUDA), and fedhet.
# Usage: bash scripts/setup.sh [extra]   (extra: "dev" for the test tools)
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
venv=".venv"

if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "setup: installing dataset-fashion-mnist (Debian package)" >&2
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "setup: Fashion-MNIST is not in /usr/share/datasets/fashion-mnist and this user cannot apt-get;" \
         "fedhet will look in data.root or download it" >&2
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv" >&2
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
stamp="$venv/.fedhet-installed-${extra:-base}"
# A stamp is not proof: a venv whose numpy was removed (or never installed) is installed again.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || ! "$py" -c "import numpy" 2>/dev/null; then
  echo "setup: installing torch==2.13.0 and fedhet${extra:+[$extra]} into $venv" >&2
  # numpy with torch: torch imported without numpy prints "Failed to initialize NumPy" (and has no
  # tensor <-> array conversion), so the check below must not run before numpy is there.
  "$py" -m pip install -q --disable-pip-version-check "torch==2.13.0" "numpy>=1.24" 2>&1 | grep -v "^WARNING: Location" || true
  "$py" -W error::UserWarning -c "import numpy, torch" || { echo "setup: torch or numpy failed to install" >&2; exit 1; }
  target="."
  [ -n "$extra" ] && target=".[$extra]"
  "$py" -m pip install -q --disable-pip-version-check -e "$target" 2>&1 | grep -v "^WARNING: Location" || true
  "$py" -c "import fedhet" || { echo "setup: fedhet failed to install" >&2; exit 1; }
  touch "$stamp"
fi
