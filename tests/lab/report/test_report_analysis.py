"""fedhet.load_runs: run directories as one per-round table (pandas when installed, else records)."""
import sys

import pytest

import fedhet
from fedhet.engine.runner import run_experiment
from fedhet.lab.report.runs import RunDirectoryError


@pytest.fixture
def two_runs(tmp_path):
    from fedhet.config.schema import load_config
    from small_run import SMALL

    results = {}
    for seed in (1, 2):
        config = load_config(None, [*SMALL, f"run.out_dir={tmp_path / 'sweep'}", f"run.name=s{seed}",
                                    f"run.seed={seed}", "run.rounds=3", "run.eval_every=1"])
        results[seed] = run_experiment(config)
    return tmp_path / "sweep", results


def test_records_hold_one_row_per_run_and_evaluated_round(two_runs):
    folder, results = two_runs
    rows = fedhet.load_runs(folder, as_records=True)
    assert [(r["run"], r["seed"], r["round"]) for r in rows] == [("s1", 1, 1), ("s1", 1, 2), ("s1", 1, 3),
                                                                ("s2", 2, 1), ("s2", 2, 2), ("s2", 2, 3)]
    for seed, result in results.items():
        mine = [r for r in rows if r["seed"] == seed]
        assert [r["test_accuracy"] for r in mine] == [h["test_accuracy"] for h in result.history]
        assert all(r["algorithm"] == "fedavg" and r["client"] == "sgd" and r["server"] == "fedavg" for r in mine)


def test_a_dataframe_when_pandas_is_installed(two_runs):
    pandas = pytest.importorskip("pandas")
    folder, results = two_runs
    table = fedhet.load_runs([folder / "s1", folder / "s2"])
    assert isinstance(table, pandas.DataFrame) and len(table) == 6
    final = table[table["round"] == 3].set_index("seed")["test_accuracy"]
    assert final[1] == results[1]["final_accuracy"] and final[2] == results[2]["final_accuracy"]


def test_records_without_pandas(two_runs, monkeypatch):
    folder, _ = two_runs
    monkeypatch.setitem(sys.modules, "pandas", None)     # import pandas raises ImportError
    rows = fedhet.load_runs(folder)
    assert isinstance(rows, list) and len(rows) == 6


def test_a_path_that_is_not_a_run_is_refused(tmp_path):
    with pytest.raises(RunDirectoryError, match="no such directory"):
        fedhet.load_runs(tmp_path / "missing")
