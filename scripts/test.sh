#!/usr/bin/env bash
# Runs fedhet's test suite (sets itself up first). Extra arguments go to pytest.
# Two worker processes (pytest-xdist), one per core of the 2-core machines the suite is sized for; each
# test module runs whole in one worker (--dist loadscope), so a module's shared set-up (a local Ray, a
# trained run several tests read) is made once. Modules are handed out in tests/conftest.py's order, the
# longest first (--no-loadscope-reorder: xdist would otherwise sort them by their number of tests and
# start the long one-test modules last). The 30 slowest tests are listed at the end, for the suite's
# time budget. `-n 0` after it runs the suite in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
exec .venv/bin/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder --durations=30 "$@"
