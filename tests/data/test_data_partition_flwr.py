"""``partition.name = "flwr"``: Flower Datasets' partitioners on fedhet's own tensors.

The reference is Flower Datasets itself, used the documented way: a ``FederatedDataset`` over the
same labels (written to a local Parquet file and read by the ``parquet`` builder of ``datasets``, so
no hub is involved) with the partitioner for its ``"train"`` split, and ``load_partition(i)``. Its
index column says which of the original examples each partition holds. None of this goes through
fedhet's code. Every test runs with outgoing connections refused and recorded.
"""
from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

datasets = pytest.importorskip("datasets")
flwr_partitioner = pytest.importorskip("flwr_datasets.partitioner")
from flwr_datasets import FederatedDataset  # noqa: E402

from fedhet.config.schema import config_to_toml, load_config  # noqa: E402
from fedhet.core.options import ConfigError  # noqa: E402
from fedhet.core.registry import PARTITIONERS  # noqa: E402
from fedhet.core.seeding import derive_seed  # noqa: E402
from fedhet.data.flower_partition import FlowerPartitionError  # noqa: E402

NUM_EXAMPLES = 1200
LABELS = np.random.default_rng(7).integers(0, 10, NUM_EXAMPLES)
DISTRIBUTION = np.random.default_rng(3).lognormal(0.0, 1.0, (10, 2))     # [labels, partitions * 2 / labels]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Refuse (and record) every outgoing connection: nothing here may reach the hub."""
    attempts = []

    def refuse(sock, address, *args):
        attempts.append(address)
        raise OSError(f"test: connection to {address} refused")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield attempts
    assert attempts == []


@pytest.fixture(scope="module")
def parquet_train(tmp_path_factory):
    path = tmp_path_factory.mktemp("flwr") / "train.parquet"
    datasets.Dataset.from_dict({"label": LABELS.tolist(), "position": list(range(NUM_EXAMPLES))}).to_parquet(str(path))
    return path


def flower_datasets_indices(parquet_train, tmp_path, partitioner, *, seed=42, shuffle=True):
    """What Flower Datasets gives: FederatedDataset(..., partitioners={"train": partitioner})."""
    fds = FederatedDataset(dataset="parquet", data_files={"train": str(parquet_train)}, cache_dir=str(tmp_path / "hf"),
                           partitioners={"train": partitioner}, shuffle=shuffle, seed=seed)
    first = sorted(fds.load_partition(0, "train")["position"])    # assigns the split to the partitioner
    return [first] + [sorted(fds.load_partition(i, "train")["position"]) for i in range(1, partitioner.num_partitions)]


def fedhet_indices(*overrides, labels=LABELS, seed=12345):
    config = load_config(None, ["partition.name=flwr", *overrides])
    parts = PARTITIONERS.get("flwr").factory(config.partition.options, targets=torch.as_tensor(labels),
                                             num_classes=10, seed=seed, natural=None)
    assert all(p.dtype == torch.int64 for p in parts)
    return [p.tolist() for p in parts]


# (fedhet overrides, the Flower partitioner built the documented way)
CASES = {
    "iid": (["partition.partitioner=IidPartitioner", "partition.num_clients=7"],
            lambda: flwr_partitioner.IidPartitioner(num_partitions=7)),
    "dirichlet": (["partition.partitioner=DirichletPartitioner", "partition.num_clients=8",
                   "partition.args={alpha = 0.3, min_partition_size = 5}"],
                  lambda: flwr_partitioner.DirichletPartitioner(num_partitions=8, partition_by="label", alpha=0.3,
                                                                min_partition_size=5, seed=42)),
    "pathological": (["partition.partitioner=PathologicalPartitioner", "partition.num_clients=10",
                      "partition.args={num_classes_per_partition = 2}"],
                     lambda: flwr_partitioner.PathologicalPartitioner(num_partitions=10, partition_by="label",
                                                                      num_classes_per_partition=2, seed=42)),
    "shard": (["partition.partitioner=ShardPartitioner", "partition.num_clients=6",
               "partition.args={num_shards_per_partition = 3}"],
              lambda: flwr_partitioner.ShardPartitioner(num_partitions=6, partition_by="label",
                                                        num_shards_per_partition=3, seed=42)),
    "inner-dirichlet": (["partition.partitioner=InnerDirichletPartitioner",
                         "partition.args={partition_sizes = [500, 400, 300], alpha = 0.5}"],
                        lambda: flwr_partitioner.InnerDirichletPartitioner(partition_sizes=[500, 400, 300],
                                                                           partition_by="label", alpha=0.5, seed=42)),
    "size": (["partition.partitioner=SizePartitioner", "partition.args={partition_sizes = [100, 250, 50]}"],
             lambda: flwr_partitioner.SizePartitioner(partition_sizes=[100, 250, 50])),
    "linear": (["partition.partitioner=LinearPartitioner", "partition.num_clients=5"],
               lambda: flwr_partitioner.LinearPartitioner(num_partitions=5)),
    "square": (["partition.partitioner=SquarePartitioner", "partition.num_clients=4"],
               lambda: flwr_partitioner.SquarePartitioner(num_partitions=4)),
    "exponential": (["partition.partitioner=ExponentialPartitioner", "partition.num_clients=4"],
                    lambda: flwr_partitioner.ExponentialPartitioner(num_partitions=4)),
    # distribution_array is typed as an array only: fedhet turns the TOML list into one.
    "distribution": (["partition.partitioner=DistributionPartitioner", "partition.num_clients=10",
                      f"partition.args={{distribution_array = {DISTRIBUTION.tolist()}, "
                      "num_unique_labels_per_partition = 2, preassigned_num_samples_per_label = 5}"],
                     lambda: flwr_partitioner.DistributionPartitioner(
                         distribution_array=DISTRIBUTION, num_partitions=10, num_unique_labels_per_partition=2,
                         partition_by="label", preassigned_num_samples_per_label=5, seed=42)),
    "continuous": (["partition.partitioner=ContinuousPartitioner", "partition.num_clients=5",
                    "partition.args={strictness = 0.5}"],
                   lambda: flwr_partitioner.ContinuousPartitioner(num_partitions=5, partition_by="label",
                                                                  strictness=0.5, seed=42)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_indices_equal_flower_datasets(case, parquet_train, tmp_path):
    overrides, make = CASES[case]
    expected = flower_datasets_indices(parquet_train, tmp_path, make())
    assert fedhet_indices(*overrides, "partition.seed=42") == expected


def test_the_engine_seed_is_flowers_seed_when_partition_seed_is_unset(parquet_train, tmp_path):
    """Without partition.seed the engine passes derive_seed(run.seed, "partition") (runner.py):
    it is FederatedDataset's seed and the partitioner's."""
    seed = derive_seed(3, "partition")
    expected = flower_datasets_indices(parquet_train, tmp_path, flwr_partitioner.DirichletPartitioner(
        num_partitions=6, partition_by="label", alpha=0.5, seed=seed), seed=seed)
    got = fedhet_indices("partition.partitioner=DirichletPartitioner", "partition.num_clients=6",
                         "partition.args={alpha = 0.5}", seed=seed)
    assert got == expected
    assert got != fedhet_indices("partition.partitioner=DirichletPartitioner", "partition.num_clients=6",
                                 "partition.args={alpha = 0.5}", seed=seed + 1)


def test_shuffle_dataset_false_is_federated_dataset_without_shuffle(parquet_train, tmp_path):
    expected = flower_datasets_indices(parquet_train, tmp_path, flwr_partitioner.IidPartitioner(num_partitions=4),
                                       shuffle=False)
    got = fedhet_indices("partition.partitioner=IidPartitioner", "partition.num_clients=4",
                         "partition.shuffle_dataset=false")
    assert got == expected
    # Unshuffled, the IID partitioner is contiguous blocks of the training set.
    assert got == [list(range(i * 300, (i + 1) * 300)) for i in range(4)]


@pytest.mark.parametrize("case", ["iid", "dirichlet", "inner-dirichlet", "continuous"])
def test_covering_partitioners_use_every_index_once(case):
    parts = fedhet_indices(*CASES[case][0])
    every = sorted(i for part in parts for i in part)
    assert every == list(range(NUM_EXAMPLES))
    assert all(part == sorted(part) for part in parts)


def test_shards_leave_out_only_the_incomplete_shard():
    # 6 clients x 3 shards of 1200 // 18 = 66 examples: 1188 used once, 12 left out (Flower's default
    # keep_incomplete_shard = false).
    every = sorted(i for part in fedhet_indices(*CASES["shard"][0]) for i in part)
    assert len(every) == len(set(every)) == 18 * 66


def test_size_partitioner_gives_the_requested_sizes():
    assert [len(p) for p in fedhet_indices(*CASES["size"][0])] == [100, 250, 50]


def _mean_top_class_share(parts):
    return np.mean([np.bincount(LABELS[part], minlength=10).max() / len(part) for part in parts])


def test_dirichlet_alpha_controls_label_skew():
    def parts(alpha):
        return fedhet_indices("partition.partitioner=DirichletPartitioner", "partition.num_clients=5",
                              f"partition.args={{alpha = {alpha}, min_partition_size = 1}}")
    # Ten balanced classes: about 0.1 (plus sampling noise) without skew, near 1 with alpha -> 0.
    assert _mean_top_class_share(parts(1000.0)) < 0.2
    assert _mean_top_class_share(parts(0.05)) > 0.5


def test_pathological_clients_hold_at_most_their_classes():
    parts = fedhet_indices(*CASES["pathological"][0])
    assert all(len(np.unique(LABELS[part])) <= 2 for part in parts)
    # Disjoint; a class no client drew is left out whole.
    every = [i for part in parts for i in part]
    assert len(every) == len(set(every))
    used = np.unique(LABELS[every])
    assert len(every) == int(np.isin(LABELS, used).sum())


def test_natural_id_partitioner_on_client_id_is_the_natural_partition():
    from fedhet.data.partition import natural_partition
    from fedhet.data.synthetic import make_synthetic

    bundle = make_synthetic(num_devices=9, seed=0, max_device_size=80)
    config = load_config(None, ["partition.name=flwr", "partition.partitioner=NaturalIdPartitioner",
                                "partition.args={partition_by = \"client_id\"}"])
    parts = PARTITIONERS.get("flwr").factory(config.partition.options, targets=bundle.train.targets, num_classes=10,
                                             seed=0, natural=bundle.client_indices)
    assert [p.tolist() for p in parts] == [p.tolist() for p in natural_partition(bundle)]
    with pytest.raises(ConfigError, match="no natural clients"):
        fedhet_indices("partition.partitioner=NaturalIdPartitioner", "partition.args={partition_by = \"client_id\"}")


@pytest.mark.parametrize("overrides, message", [
    (["partition.partitioner=DirichletPartitionr"], "did you mean 'DirichletPartitioner'.*allowed: .*IidPartitioner"),
    (["partition.partitioner=VerticalEvenPartitioner"], "splits features"),
    (["partition.partitioner=DirichletPartitioner", "partition.num_clients=4", "partition.args={alpah = 0.3}"],
     r"partition.args.alpah = 0.3: not an argument of DirichletPartitioner \(did you mean alpha\?\); "
     r"allowed: partition_by, alpha, min_partition_size, self_balancing, shuffle$"),
    (["partition.partitioner=DirichletPartitioner", "partition.num_clients=4"], "requires alpha"),
    (["partition.partitioner=DirichletPartitioner", "partition.args={alpha = 0.3}"], "num_clients.*required"),
    (["partition.partitioner=IidPartitioner", "partition.num_clients=4", "partition.args={num_partitions = 4}"],
     "set partition.num_clients instead"),
    (["partition.partitioner=IidPartitioner", "partition.num_clients=4", "partition.args={seed = 4}"],
     "not an argument of IidPartitioner"),
    (["partition.partitioner=DirichletPartitioner", "partition.num_clients=4", "partition.args={alpha = 0.3, seed = 1}"],
     "set partition.seed instead"),
    (["partition.partitioner=PathologicalPartitioner", "partition.num_clients=4",
      "partition.args={num_classes_per_partition = 2, class_assignment_mode = \"rand\"}"], "allowed: 'random'"),
    (["partition.partitioner=DirichletPartitioner", "partition.num_clients=4", "partition.args={alpha = -1.0}"],
     "DirichletPartitioner refused it"),
    (["partition.partitioner=DirichletPartitioner", "partition.num_clients=4",
      "partition.args={alpha = 0.3, partition_by = \"fine_label\"}"], "allowed: 'label'"),
    (["partition.partitioner=IidPartitioner", "partition.num_clients=4", "partition.args=3"], "expected a table"),
    ([], r"partition.partitioner = None: required"),
])
def test_bad_configs_give_one_line_errors(overrides, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(None, ["partition.name=flwr", *overrides])
    assert "\n" not in str(info.value)


def test_partition_count_must_match_num_clients():
    with pytest.raises(ConfigError, match="SizePartitioner made 3 partitions"):
        fedhet_indices(*CASES["size"][0], "partition.num_clients=4")


def test_flower_failures_are_user_errors():
    with pytest.raises(FlowerPartitionError, match="ShardPartitioner could not partition"):
        fedhet_indices("partition.partitioner=ShardPartitioner", "partition.num_clients=6",
                       "partition.args={num_shards_per_partition = 3, shard_size = 1000}")


def test_missing_flwr_datasets_names_the_extra(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "flwr_datasets.partitioner", None)
    with pytest.raises(ConfigError, match=r"pip install 'fedhet\[flower\]'"):
        load_config(None, ["partition.name=flwr", "partition.partitioner=IidPartitioner"])


def test_resolved_config_round_trips_through_toml(tmp_path):
    config = load_config(None, ["partition.name=flwr", "partition.partitioner=InnerDirichletPartitioner",
                                "partition.args={partition_sizes = [5, 7], alpha = [0.1, 0.2, 0.3], \"partition_by\" = \"label\"}"])
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(config))
    assert load_config(path) == config


def test_run_experiment_with_a_flower_partitioner(tmp_path):
    from fedhet.engine.runner import run_experiment

    config = load_config(None, [
        "data.name=synthetic", "data.num_devices=10", "data.max_device_size=60",
        "partition.name=flwr", "partition.partitioner=DirichletPartitioner", "partition.num_clients=6",
        "partition.args={alpha = 0.5, min_partition_size = 5}", "partition.seed=42",
        "model.name=logreg", "participation.clients_per_round=3", "client.learning_rate=0.05",
        "client.batch_size=16", "run.rounds=2", "run.progress=false", f"run.out_dir={tmp_path}", "run.name=flwr"])
    summary = run_experiment(config)
    run_dir = tmp_path / "flwr"
    assert summary["rounds"] == 2
    rows = (run_dir / "partition.csv").read_text().splitlines()
    assert len(rows) == 1 + 6
    assert (run_dir / "partition.png").stat().st_size > 0
    # The CSV's per-client totals are those of the Dirichlet partition of the same labels.
    from fedhet.core.registry import DATASETS

    bundle = DATASETS.get("synthetic").factory(config.data.options, seed=derive_seed(config.run.seed, "data"))
    targets = bundle.train.targets
    expected = fedhet_indices("partition.partitioner=DirichletPartitioner", "partition.num_clients=6",
                              "partition.args={alpha = 0.5, min_partition_size = 5}", "partition.seed=42",
                              labels=targets.numpy())
    assert [int(row.split(",")[-1]) for row in rows[1:]] == [len(part) for part in expected]
    assert 'partitioner = "DirichletPartitioner"' in (run_dir / "config.toml").read_text()


def test_example_config_loads():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "configs" / "examples" / "flwr_partition.toml"
    options = load_config(path).partition.options
    assert (options.partitioner, options.num_clients, options.seed) == ("DirichletPartitioner", 100, 42)
