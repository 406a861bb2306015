"""Issue 12, finding 9: the dataset files a run read, with their sha256, in data_files.json."""
import gzip
import hashlib
import json

import numpy as np

from fedhet.config.schema import load_config
from fedhet.data.idx import IDX_FILE_STEMS
from fedhet.data.provenance import DATA_FILES_NAME
from fedhet.engine.runner import run_experiment


def test_data_files_json_records_the_root_files_and_their_sha256(tmp_path, make_idx_bytes):
    root = tmp_path / "my-mnist"
    root.mkdir()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 28, 28), dtype=np.uint8)
    labels = np.arange(40, dtype=np.uint8) % 10
    for stem, array in zip(IDX_FILE_STEMS, (images, labels, images[:20], labels[:20])):
        (root / f"{stem}.gz").write_bytes(gzip.compress(make_idx_bytes(array)))
    config = load_config(None, ["data.name=mnist", f"data.root={root}", "data.download=false",
                                f"data.cache_dir={tmp_path / 'cache'}", "model.name=logreg",
                                "partition.name=iid", "partition.num_clients=4", "participation.clients_per_round=2",
                                "run.rounds=1", "run.progress=false", "run.backend=sequential", f"run.out_dir={tmp_path / 'runs'}", "run.name=m"])
    run_experiment(config)
    record = json.loads((tmp_path / "runs" / "m" / DATA_FILES_NAME).read_text())
    assert record["dataset"] == "mnist" and record["root"] == str(root)
    expected = {str(root / f"{stem}.gz"): hashlib.sha256((root / f"{stem}.gz").read_bytes()).hexdigest()
                for stem in IDX_FILE_STEMS}
    assert {f["path"]: f["sha256"] for f in record["files"]} == expected


def test_generated_data_records_no_files(tmp_path):
    from small_run import SMALL

    run_experiment(load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=s", "run.rounds=1"]))
    record = json.loads((tmp_path / "s" / DATA_FILES_NAME).read_text())
    assert record["dataset"] == "synthetic" and record["files"] == [] and record["root"] is None

