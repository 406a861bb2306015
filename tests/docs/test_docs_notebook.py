"""The example notebook runs with a notebook client and prints and plots what the API computes."""
import base64
import os
import re
import shutil

import pytest

from docs_modules import ROOT, load
from fedhet import load_config, run_experiment
from fedhet.presets import write_preset

NOTEBOOK = ROOT / "docs" / "examples" / "quickstart.ipynb"
FINAL = re.compile(r"^(\w+): final accuracy (\d\.\d{4}) after (\d+) rounds$", re.MULTILINE)


def _outputs(notebook):
    streams = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", [])
                      if o.output_type == "stream")
    images = [base64.b64decode(o["data"]["image/png"]) for c in notebook.cells for o in c.get("outputs", [])
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    return {m[0]: (float(m[1]), int(m[2])) for m in FINAL.findall(streams)}, images


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_the_stored_notebook_holds_its_outputs():
    nbformat = pytest.importorskip("nbformat")
    finals, images = _outputs(nbformat.read(NOTEBOOK, as_version=4))
    assert set(finals) == {"fedavg", "fedaware"}
    assert len(images) == 1


@pytest.mark.slow
def test_notebook_executes_and_reports_the_runs_it_made(tmp_path):
    execute_notebook = load("docs/examples/execute_notebook.py")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    # The kernel imports this checkout and puts its temporary run directories under tmp_path.
    env = dict(os.environ, TMPDIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    executed = execute_notebook.execute(work / NOTEBOOK.name, cwd=work, env=env, timeout=120)
    finals, images = _outputs(executed)
    assert set(finals) == {"fedavg", "fedaware"}
    [image] = images
    width, height = _png_size(image)
    assert width > 300 and height > 100

    [runs] = tmp_path.glob("fedhet-quickstart-*/runs")
    assert sorted(p.name for p in runs.iterdir()) == ["quick_fedavg", "quick_fedaware"]
    # The printed accuracy is the one the API computes for that configuration.
    config = load_config(write_preset("synthetic_quickstart", tmp_path / "ref"),
                         ["run.progress=false", f"run.out_dir={tmp_path / 'ref_runs'}"])
    summary = run_experiment(config)
    assert finals["fedavg"] == (round(summary["final_accuracy"], 4), config.run.rounds)
