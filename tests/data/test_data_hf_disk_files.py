"""data.name = "hf" reads only regular files inside data.path, never blocks on a FIFO, and records in
data_files.json exactly the files it read."""
from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from fedhet.data.errors import DatasetFileError
from fedhet.data.hf_disk import HfDiskOptions, load_hf_disk
from fedhet.data.hf_layout import saved_dataset_files

datasets = pytest.importorskip("datasets")

ARROW = "data-00000-of-00001.arrow"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _saved(path, offset=0.0):
    train = datasets.Dataset.from_dict({"x": [[offset, 1.0], [1.0, 0.5], [2.0, 2.0]], "label": [0, 2, 1]})
    test = datasets.Dataset.from_dict({"x": [[0.5, 0.5]], "label": [2]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(path))
    return path


def _point_train_at(directory, filename):
    state_path = directory / "train" / "state.json"
    state = json.loads(state_path.read_text())
    state["_data_files"] = [{"filename": filename}]
    state_path.write_text(json.dumps(state))


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_data_file_named_outside_the_directory_is_refused(tmp_path, form):
    outside = _saved(tmp_path / "outside", offset=7.0)
    crafted = _saved(tmp_path / "crafted")
    target = outside / "train" / ARROW
    _point_train_at(crafted, os.path.relpath(target, crafted / "train") if form == "relative" else str(target))
    with pytest.raises(DatasetFileError, match="outside data.path"):
        load_hf_disk(HfDiskOptions(path=str(crafted)))


def test_a_data_file_linked_out_of_the_directory_is_refused(tmp_path):
    outside = _saved(tmp_path / "outside", offset=7.0)
    crafted = _saved(tmp_path / "crafted")
    (crafted / "train" / ARROW).unlink()
    os.symlink(outside / "train" / ARROW, crafted / "train" / ARROW)
    with pytest.raises(DatasetFileError, match="outside data.path"):
        load_hf_disk(HfDiskOptions(path=str(crafted)))


def test_a_split_named_outside_the_directory_is_refused(tmp_path):
    _saved(tmp_path / "outside")
    crafted = _saved(tmp_path / "crafted")
    (crafted / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "../outside/test"]}))
    with pytest.raises(DatasetFileError, match="not a folder name"):
        load_hf_disk(HfDiskOptions(path=str(crafted)))


def test_a_fifo_in_place_of_a_data_file_is_refused_without_blocking(tmp_path):
    crafted = _saved(tmp_path / "crafted")
    (crafted / "train" / ARROW).unlink()
    os.mkfifo(crafted / "train" / ARROW)
    outcome = []

    def load():
        try:
            load_hf_disk(HfDiskOptions(path=str(crafted)))
        except DatasetFileError as error:
            outcome.append(str(error))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(30)
    assert outcome and "not a regular file" in outcome[0]


def test_the_files_recorded_are_the_files_read(tmp_path):
    saved = _saved(tmp_path / "saved")
    (saved / "train" / "stray.arrow").write_bytes(b"not read")             # present, never opened
    bundle = load_hf_disk(HfDiskOptions(path=str(saved)))
    root = saved.resolve()
    expected = {root / "dataset_dict.json"} | {root / split / name for split in ("train", "test")
                                                for name in ("dataset_info.json", "state.json", ARROW)}
    assert set(map(str, expected)) == set(bundle.source_files or ())
    assert set(saved_dataset_files(saved)) == expected


def test_a_link_that_stays_inside_the_directory_is_read_and_recorded_as_its_target(tmp_path):
    saved = _saved(tmp_path / "saved")
    shutil.move(saved / "train" / ARROW, saved / "train" / "real.arrow")
    os.symlink("real.arrow", saved / "train" / ARROW)
    bundle = load_hf_disk(HfDiskOptions(path=str(saved)))
    assert bundle.train.inputs.shape == (3, 2)
    assert str((saved / "train" / "real.arrow").resolve()) in (bundle.source_files or ())


def test_a_run_on_a_crafted_directory_stops_with_one_line(tmp_path, capsys):
    from fedhet.cli import main

    outside = _saved(tmp_path / "outside", offset=7.0)
    crafted = _saved(tmp_path / "crafted")
    _point_train_at(crafted, str(outside / "train" / ARROW))
    config = tmp_path / "hf.toml"
    config.write_text(f'[data]\nname = "hf"\npath = "{crafted}"\n[model]\nname = "logreg"\n'
                      '[partition]\nname = "iid"\nnum_clients = 2\n[participation]\nclients_per_round = 1\n'
                      f'[run]\nrounds = 1\nprogress = false\nout_dir = "{tmp_path / "runs"}"\n')
    capsys.readouterr()                                   # save_to_disk's progress bars
    status = main(["run", str(config)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("fedhet: ") and "outside data.path" in err[0]
