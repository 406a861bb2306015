"""MLflow's store: one SQLite database per output directory by default (MLflow's default since 3.7), so
that `mlflow ui` shows a sweep from one store; a file: store is still read and written when the user names
one, or when an earlier fedhet made one beside the run directory (docs/tracking.md, "MLflow's store")."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracking_readers import jsonl_series, mlflow_series, run_python, same_series

pytest.importorskip("mlflow")
pytest.importorskip("sqlalchemy")

SWEEP = """
import io
from pathlib import Path
from small_run import SMALL
from fedhet.config.schema import config_to_toml, load_config
from fedhet.engine.tracking import sweep_viewer_lines
from fedhet.lab.sweep.plan import plan_sweep
from fedhet.lab.sweep.execute import run_sweep

base = load_config(None, [*SMALL, "run.name=par", "run.rounds=2", 'run.trackers=["mlflow"]'])
Path("par.toml").write_text(config_to_toml(base))
result = run_sweep(plan_sweep("par.toml", seeds=[1, 2, 3, 4], out_dir="../sweep"), jobs=2, stream=io.StringIO())
assert not result.failed, [o.error for o in result.failed]
print(json.dumps(sweep_viewer_lines([(o.run.name, o.run.seed, o.run.run_dir) for o in result.outcomes])))
""".replace("import io", "import io, json")


def test_a_parallel_sweep_tracks_every_run_in_one_sqlite_store(tmp_path):
    """Four runs on two sweep workers that start together on a store that does not exist yet: one
    database in the sweep directory holds one experiment (the sweep's name) with every run, each equal
    to its metrics.jsonl, and the sweep's closing line opens that database in `mlflow ui`."""
    printed = json.loads(run_python(SWEEP, tmp_path).stdout.strip().splitlines()[-1])
    sweep_dir = (tmp_path / "sweep").resolve()
    run_dirs = sorted(path.parent for path in sweep_dir.glob("*/tracking.json"))
    assert len(run_dirs) == 4
    states = [json.loads((path / "tracking.json").read_text())["mlflow"] for path in run_dirs]
    uri = "sqlite:///" + str(sweep_dir / "mlflow.db")
    assert {state["tracking_uri"] for state in states} == {uri}
    assert not (sweep_dir / "mlruns").exists() and not (tmp_path / "cwd" / "mlruns").exists()

    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=uri)
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    assert [e.name for e in experiments] == ["par"]
    runs = client.search_runs([experiments[0].experiment_id], max_results=100)
    assert {run.info.run_id for run in runs} == {state["run_id"] for state in states}
    assert all(run.info.status == "FINISHED" for run in runs)
    for run_dir, state in zip(run_dirs, states):
        expected = jsonl_series(run_dir)
        assert same_series(mlflow_series(uri, state["run_id"], expected), expected)
    assert printed == [f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1"] or \
        printed[0].startswith(f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1   (")


FILE_STORES = """
from pathlib import Path
from small_run import SMALL
from fedhet import load_config, run_experiment

def run(name, out, *sets):
    run_experiment(load_config(None, [*SMALL, f"run.out_dir={out}", f"run.name={name}", "run.rounds=2",
                                      'run.trackers=["mlflow"]', *sets]))

# a store named by the user: file: is still written ...
run("named", "../named", f'run.mlflow_uri="{Path("../stores/mine").resolve().as_uri()}"')
# ... and an earlier fedhet's default store beside the run directory is kept, not split from new runs
run("old", "../legacy", f'run.mlflow_uri="{Path("../legacy/mlruns").resolve().as_uri()}"')
run("new", "../legacy")
"""


def test_file_stores_named_or_made_earlier_are_still_read_and_written(tmp_path):
    run_python(FILE_STORES, tmp_path)
    from mlflow.tracking import MlflowClient

    mine = (tmp_path / "stores" / "mine").resolve().as_uri()
    state = json.loads((tmp_path / "named" / "named" / "tracking.json").read_text())["mlflow"]
    assert state["tracking_uri"] == mine
    expected = jsonl_series(tmp_path / "named" / "named")
    assert same_series(mlflow_series(mine, state["run_id"], expected), expected)
    assert not (tmp_path / "named" / "mlflow.db").exists()

    legacy = (tmp_path / "legacy" / "mlruns").resolve().as_uri()
    states = {name: json.loads((tmp_path / "legacy" / name / "tracking.json").read_text())["mlflow"]
              for name in ("old", "new")}
    assert {s["tracking_uri"] for s in states.values()} == {legacy}
    assert not (tmp_path / "legacy" / "mlflow.db").exists()
    runs = MlflowClient(tracking_uri=legacy).search_runs([states["new"]["experiment_id"]])
    assert {run.info.run_id for run in runs} == {s["run_id"] for s in states.values()}


@pytest.mark.parametrize("name", ["with space", "q?mark", "pct%41", "hash#x"])
def test_the_default_store_is_the_database_beside_the_run_whatever_the_folder_is_named(tmp_path, name):
    from sqlalchemy.engine import make_url

    from fedhet.tracking.mlflow import default_tracking_uri, sqlite_path

    run_dir = tmp_path / name / "run"
    run_dir.mkdir(parents=True)
    uri = default_tracking_uri(run_dir)
    assert make_url(uri).database == str((tmp_path / name / "mlflow.db").resolve())
    assert sqlite_path(uri) == (tmp_path / name / "mlflow.db").resolve()


def test_a_linked_default_database_is_refused_and_its_target_untouched(tmp_path):
    """mlflow.db in the output directory is opened by SQLite, which would write through a planted link."""
    victim = tmp_path / "victim.db"
    victim.write_bytes(b"")
    out = tmp_path / "out"
    out.mkdir()
    (out / "mlflow.db").symlink_to(victim)
    code = f"""
import sys
from small_run import SMALL
from fedhet.cli import main
toml = "\\n".join(["[run]", "name = 'x'", "out_dir = {str(out)!r}", "trackers = ['mlflow']"])
open("x.toml", "w").write(toml)
sys.exit(main(["run", "x.toml", *[a for s in SMALL for a in ("--set", s)], "--set", "run.rounds=1"]))
"""
    result = run_python(code, tmp_path, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert lines[-1].startswith("fedhet: ") and "mlflow.db is a symbolic link" in lines[-1]
    assert victim.read_bytes() == b""


LEGACY = """
from pathlib import Path
from small_run import SMALL
from fedhet import load_config, run_experiment
run_experiment(load_config(None, [*SMALL, "run.out_dir=../legacy", "run.name=old", "run.rounds=2", 'run.trackers=["mlflow"]',
                                  f'run.mlflow_uri="{Path("../legacy/mlruns").resolve().as_uri()}"']))
"""


def test_a_file_store_migrates_to_sqlite_with_mlflows_command(tmp_path):
    """docs/tracking.md's migration: `mlflow migrate-filestore` moves a fedhet file store's runs, ids
    and metrics into a SQLite database that fedhet then uses as the default store there."""
    run_python(LEGACY, tmp_path)
    legacy = tmp_path / "legacy"
    state = json.loads((legacy / "old" / "tracking.json").read_text())["mlflow"]
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    database = "sqlite:///" + str((legacy / "mlflow.db").resolve())
    result = subprocess.run([str(mlflow_cli), "migrate-filestore", "--source", str(legacy / "mlruns"),
                             "--target", database], capture_output=True, text=True, timeout=240,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MLFLOW_DISABLE_TELEMETRY": "true"})
    if result.returncode != 0 and "No such command" in result.stderr:
        pytest.skip("this MLflow has no migrate-filestore (MLflow >= 3.10)")
    assert result.returncode == 0, result.stderr[-2000:]
    expected = jsonl_series(legacy / "old")
    assert same_series(mlflow_series(database, state["run_id"], expected), expected)

    from fedhet.tracking.mlflow import default_tracking_uri
    assert default_tracking_uri(legacy / "another") == database


def test_mlflow_skinny_without_sqlalchemy_is_named_in_one_line(monkeypatch):
    """mlflow-skinny does not install what MLflow's SQLite store needs: the run says what to install."""
    import importlib.util

    from fedhet.error_lines import error_line
    from fedhet.tracking import mlflow as tracker
    from fedhet.tracking.names import TrackerUnavailableError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name in ("sqlalchemy", "alembic") else real(name, *args))
    with pytest.raises(TrackerUnavailableError) as caught:
        tracker._check_sqlalchemy()
    line, status = error_line(caught.value)
    assert status == 2 and "\n" not in line
    assert "needs sqlalchemy and alembic, which mlflow-skinny does not install" in line
    assert "run.mlflow_uri to a file: store" in line
