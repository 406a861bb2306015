"""Executes a notebook with a Jupyter kernel (nbclient + ipykernel) and stores its outputs.

    python docs/examples/execute_notebook.py docs/examples/quickstart.ipynb

re-runs the example after a change to fedhet, so that the outputs stored in the notebook (and shown
on the docs site) are those of the current code. The test suite calls :func:`execute` on a copy.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

_SRC = Path(__file__).resolve().parents[2] / "src"


def execute(path: str | Path, *, cwd: str | Path, env: dict[str, str] | None = None, timeout: int = 300):
    """Run every cell of the notebook at ``path`` in a fresh ``python3`` kernel started in ``cwd``.

    ``env`` is the kernel's environment (default: this process's, with the checkout's ``src/`` on
    ``PYTHONPATH``). Returns the executed notebook; raises ``nbclient.exceptions.CellExecutionError``
    when a cell fails and ``TimeoutError`` when one runs longer than ``timeout`` seconds.
    """
    notebook = nbformat.read(path, as_version=4)
    if env is None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_SRC), os.environ.get("PYTHONPATH")])))
    # record_timing=False: no timestamps in the stored notebook, so a re-run changes only real outputs.
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    return notebook


if __name__ == "__main__":
    for name in sys.argv[1:]:
        executed = execute(name, cwd=Path(name).resolve().parent)
        nbformat.write(executed, name)
        print(f"executed {name}")
