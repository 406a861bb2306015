"""Inputs that fedhet reported as its own bugs ("internal error ... exit 3") are one-line user
errors with exit 2: damaged ``hf`` directories, text fed to a model without an embedding, and an
MLflow URI at a web server that is not MLflow."""
from __future__ import annotations

import http.server
import io
import os
import threading

import pytest

from fedhet.config.schema import load_config
from fedhet.data.errors import DatasetFileError
from fedhet.engine.runner import run_experiment
from fedhet.error_lines import error_line
from fedhet.models.shapes import ModelShapeError
from small_run import SMALL

HF = ["data.name=hf", "partition.name=iid", "partition.num_clients=5", "participation.clients_per_round=2",
      "model.name=logreg", "run.rounds=1", "run.progress=false"]


def _one_line(error: BaseException) -> str:
    line, status = error_line(error)
    assert status == 2 and "\n" not in line and "internal error" not in line
    return line


def _save(path, train_rows: int, test_rows: int, *, text: bool = False):
    datasets = pytest.importorskip("datasets")

    def rows(n):
        inputs = [f"word{i % 5} other" for i in range(n)] if text else [[float(i % 7), 1.0, 2.0] for i in range(n)]
        return datasets.Dataset.from_dict({"x": inputs, "label": [i % 3 for i in range(n)]})

    datasets.DatasetDict({"train": rows(train_rows), "test": rows(test_rows)}).save_to_disk(str(path))
    return path


def _run_hf(tmp_path, directory):
    return run_experiment(load_config(None, [*HF, f"data.path={directory}", f"run.out_dir={tmp_path / 'runs'}"]))


@pytest.mark.parametrize("damage,message", [
    ("truncate", "a damaged save_to_disk directory"),
    ("state", "the split's state.json is not readable JSON (JSONDecodeError)"),     # fedhet.data.hf_layout
    ("empty_test", "split 'test' has no rows"),
])
def test_a_damaged_or_empty_hf_directory_is_a_one_line_dataset_error(tmp_path, damage, message):
    directory = _save(tmp_path / damage, 150, 0 if damage == "empty_test" else 50)
    if damage == "truncate":
        arrow = directory / "train" / "data-00000-of-00001.arrow"
        os.truncate(arrow, arrow.stat().st_size // 2)
    elif damage == "state":
        (directory / "train" / "state.json").write_text("{not json")
    with pytest.raises(DatasetFileError) as caught:
        _run_hf(tmp_path, directory)
    assert message in _one_line(caught.value) and str(directory) in str(caught.value)


def test_text_with_a_model_that_cannot_embed_tokens_is_a_model_error(tmp_path):
    directory = _save(tmp_path / "text", 30, 10, text=True)
    with pytest.raises(ModelShapeError, match="model 'logreg' cannot read the dataset's inputs .*token ids") as caught:
        _run_hf(tmp_path, directory)
    _one_line(caught.value)


class _NotMlflow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):           # every path is a 404, as `python -m http.server` answers MLflow's API
        self.send_error(404)

    do_POST = do_GET

    def log_message(self, *args):
        pass


def test_an_mlflow_uri_at_a_server_that_is_not_mlflow_is_one_line(tmp_path):
    pytest.importorskip("mlflow")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotMlflow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(Exception) as caught:
            run_experiment(load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=m",
                                              'run.trackers=["mlflow"]', f'run.mlflow_uri="{uri}"']))
    finally:
        server.shutdown()
        server.server_close()
    line = _one_line(caught.value)
    assert line.startswith(f"fedhet: run.mlflow_uri = '{uri}': the server there does not answer as an MLflow")
    assert not (tmp_path / "m" / "summary.json").exists()


def test_fedhet_check_refuses_a_profile_file_that_fedhet_run_would_refuse(tmp_path, capsys):
    from fedhet.cli import main

    profiles = tmp_path / "profiles.csv"
    profiles.write_text("client,device_flops,seconds_per_sample,uplink_bps,downlink_bps,latency\n0,nan,,1e6,1e7,0\n")
    sets = [item for pair in (("--set", s) for s in [*SMALL, "system.profiles=file",
                                                        f"system.profile_file={profiles}"]) for item in pair]
    config = tmp_path / "c.toml"
    config.write_text("[run]\nname = 'c'\n")
    assert main(["check", str(config), *sets]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "device_flops = 'nan'" in err[0] and str(profiles) in err[0]


def test_report_group_by_without_a_key_is_refused(tmp_path):
    from fedhet.lab.commands.report import report_command

    stderr = io.StringIO()
    assert report_command([str(tmp_path)], out=str(tmp_path / "r"), group_by=",,,", stdout=io.StringIO(),
                          stderr=stderr) == 2
    assert "--group-by = ',,,': name at least one configuration key" in stderr.getvalue()


def test_a_second_tune_on_one_directory_is_told_a_tune_may_hold_it(tmp_path):
    from fedhet.engine.rundir_lock import DirectoryLock, RunDirectoryInUseError

    with DirectoryLock(tmp_path, what="tune directory"):
        with pytest.raises(RunDirectoryInUseError, match=r"tune directory .* \(another fedhet run, resume, sweep, tune"):
            DirectoryLock(tmp_path, what="tune directory").acquire()
