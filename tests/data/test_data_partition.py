"""Partitioners and the partition report: coverage, determinism, min size, label skew, files."""
import numpy as np
import pytest
import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import PARTITIONERS
from fedhet.data.partition import (
    client_dirichlet_partition,
    dirichlet_partition,
    iid_partition,
    natural_partition,
    shard_partition,
)
from fedhet.data.partition_report import label_counts, plot_label_heatmap, write_label_report

NUM_CLASSES = 10
# 10 classes of unequal size (100..190 examples), interleaved like a real label file.
LABELS = torch.from_numpy(np.random.default_rng(0).permutation(np.repeat(np.arange(10), np.arange(100, 200, 10))))

PARTITIONS = {
    "iid": lambda seed: iid_partition(len(LABELS), 20, seed),
    "dirichlet": lambda seed: dirichlet_partition(LABELS, 20, 0.3, seed, min_size=5),
    "dirichlet-no-quota": lambda seed: dirichlet_partition(LABELS, 20, 0.3, seed, min_size=5, quota=False),
    "dirichlet-balanced": lambda seed: dirichlet_partition(LABELS, 20, 0.3, seed, balanced=True),
    "client-dirichlet": lambda seed: client_dirichlet_partition(LABELS, 20, 0.3, seed),
    "shards": lambda seed: shard_partition(LABELS, 20, 3, seed),
}


def _max_label_fraction(parts) -> float:
    counts = label_counts(parts, LABELS, NUM_CLASSES).double()
    return float((counts.max(1).values / counts.sum(1)).mean())


@pytest.mark.parametrize("name", sorted(PARTITIONS))
def test_disjoint_cover_sorted_int64(name):
    parts = PARTITIONS[name](0)
    assert len(parts) == 20
    assert all(p.dtype == torch.int64 and p.dim() == 1 and torch.equal(p, p.sort().values) for p in parts)
    everything = torch.cat(parts)
    assert sum(len(p) for p in parts) == len(LABELS)
    assert torch.equal(everything.sort().values, torch.arange(len(LABELS)))


@pytest.mark.parametrize("name", sorted(PARTITIONS))
def test_same_seed_same_partition_other_seed_other(name):
    first, again, other = PARTITIONS[name](1), PARTITIONS[name](1), PARTITIONS[name](2)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in iid_partition(1003, 10, 0)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003


@pytest.mark.parametrize("balanced", [False, True])
def test_min_size_is_respected(balanced):
    # 30 clients, about 48 examples each on average: at alpha = 0.3 most unconstrained draws have
    # a client below 20, so the redraw is exercised.
    for seed in range(5):
        parts = dirichlet_partition(LABELS, 30, 0.3, seed, min_size=20, balanced=balanced)
        assert min(len(p) for p in parts) >= 20


def test_balanced_sizes_are_equal():
    sizes = [len(p) for p in dirichlet_partition(LABELS, 40, 0.1, 0, balanced=True)]
    assert max(sizes) - min(sizes) <= 1


def test_impossible_min_size_is_refused_up_front():
    with pytest.raises(ValueError, match="at least 100 example"):
        dirichlet_partition(LABELS, 20, 0.5, 0, min_size=100)


def test_redraws_give_up_with_advice():
    with pytest.raises(ValueError) as info:
        dirichlet_partition(LABELS, 50, 0.01, 0, min_size=20, max_retries=3, quota=False)
    message = str(info.value)
    assert "3 draws" in message and "min_size = 20" in message and "balanced" in message


@pytest.mark.parametrize("partitioner", [
    lambda alpha, seed: dirichlet_partition(LABELS, 20, alpha, seed, min_size=1),
    lambda alpha, seed: dirichlet_partition(LABELS, 20, alpha, seed, balanced=True),
    lambda alpha, seed: client_dirichlet_partition(LABELS, 20, alpha, seed, min_size=1),
])
def test_small_alpha_gives_strong_label_skew(partitioner):
    # Dir(0.1) concentrates most of a client's data on one or two classes; Dir(100) is near uniform,
    # so the largest class share is close to the 10-class baseline of about 0.1 to 0.19. (The
    # balanced variant is a little less skewed: exhausted classes push clients to other classes.)
    skewed = np.mean([_max_label_fraction(partitioner(0.1, seed)) for seed in range(3)])
    uniform = np.mean([_max_label_fraction(partitioner(100.0, seed)) for seed in range(3)])
    assert skewed > 0.45 and uniform < 0.25


def test_dirichlet_without_quota_gives_each_client_a_dir_share_of_every_class():
    # Hsu et al.: client i's share of class c is Dir(alpha 1_N)_i, with mean 1/N. Averaged over
    # classes and seeds, every client's share of each class should be near 1/N.
    shares = []
    for seed in range(30):
        counts = label_counts(dirichlet_partition(LABELS, 4, 1.0, seed, min_size=0, quota=False), LABELS, NUM_CLASSES)
        shares.append((counts.double() / counts.sum(0, keepdim=True)).mean(1))
    mean_share = torch.stack(shares).mean(0)
    assert torch.all((mean_share - 0.25).abs() < 0.03), mean_share


def test_label_pure_shards_give_at_most_shards_per_client_labels():
    labels = torch.arange(10).repeat_interleave(40)[torch.randperm(400, generator=torch.Generator().manual_seed(0))]
    parts = shard_partition(labels, 20, 2, seed=0)  # 40 shards of 10 examples, each of one label
    counts = label_counts(parts, labels, 10)
    assert all(len(p) == 20 for p in parts)
    assert int((counts > 0).sum(1).max()) <= 2
    # Every client's examples form two blocks of 10 same-label examples.
    assert torch.all((counts % 10) == 0)


def test_shards_refuse_more_shards_than_examples():
    with pytest.raises(ValueError, match="more than the"):
        shard_partition(torch.zeros(10, dtype=torch.int64), 6, 2, 0)


def test_natural_partition_from_bundle():
    data = TensorDataset(torch.zeros(6, 2), torch.zeros(6, dtype=torch.int64))
    bundle = DatasetBundle("toy", data, data, 2, (2,), client_indices=[torch.tensor([3, 0]), torch.tensor([5])])
    assert [p.tolist() for p in natural_partition(bundle)] == [[0, 3], [5]]
    with pytest.raises(ValueError, match="no natural partition"):
        natural_partition(DatasetBundle("toy", data, data, 2, (2,)))
    overlapping = DatasetBundle("toy", data, data, 2, (2,), client_indices=[torch.tensor([1]), torch.tensor([1])])
    with pytest.raises(ValueError, match="disjoint"):
        natural_partition(overlapping)


def _call(name, values, *, seed=0, natural=None, targets=LABELS):
    entry = PARTITIONERS.get(name)
    options = build_options(entry.options_cls, values, section="partition")
    return entry.factory(options, targets=targets, num_classes=NUM_CLASSES, seed=seed, natural=natural)


def test_registry_names_and_defaults():
    for name in ("iid", "dirichlet", "client-dirichlet", "shards", "natural"):
        assert name in PARTITIONERS
    assert len(_call("iid", {})) == 100
    assert len(_call("shards", {"num_clients": 10})) == 10
    assert min(len(p) for p in _call("dirichlet", {"num_clients": 10, "alpha": 0.1})) >= 10


def test_registry_seed_option_overrides_the_resolved_seed():
    from_options = _call("dirichlet", {"num_clients": 10, "seed": 5}, seed=0)
    from_engine = _call("dirichlet", {"num_clients": 10}, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(from_options, from_engine))
    assert all(torch.equal(a, b) for a, b in zip(from_engine, dirichlet_partition(LABELS, 10, 0.5, 5)))


@pytest.mark.parametrize("name, values, key", [
    ("dirichlet", {"alpha": 0.0}, "partition.alpha"),
    ("dirichlet", {"min_size": -1}, "partition.min_size"),
    ("dirichlet", {"alhpa": 1.0}, "partition.alhpa"),
    ("iid", {"num_clients": 0}, "partition.num_clients"),
    ("shards", {"shards_per_client": 0}, "partition.shards_per_client"),
])
def test_registry_rejects_bad_options(name, values, key):
    with pytest.raises(ConfigError) as info:
        _call(name, values)
    assert info.value.key == key


@pytest.mark.parametrize("name, values", [
    ("iid", {"num_clients": 2000}),
    ("dirichlet", {"num_clients": 100, "min_size": 20}),
    ("shards", {"num_clients": 500, "shards_per_client": 3}),
])
def test_registry_rejects_infeasible_sizes(name, values):
    with pytest.raises(ConfigError, match=f"<= {len(LABELS)} training examples"):
        _call(name, values)


def test_registry_natural_needs_matching_client_count():
    natural = [torch.tensor([0, 1]), torch.tensor([2])]
    assert len(_call("natural", {}, natural=natural)) == 2
    assert len(_call("natural", {"num_clients": 2}, natural=natural)) == 2
    with pytest.raises(ConfigError, match="has 2 natural clients"):
        _call("natural", {"num_clients": 100}, natural=natural)
    with pytest.raises(ConfigError, match="no natural partition"):
        _call("natural", {})


def test_registry_checks_targets_against_num_classes():
    with pytest.raises(ValueError, match="10 classes"):
        _call("shards", {"num_clients": 2}, targets=torch.tensor([0, 1, 12, 3]))


def test_label_counts_match_a_hand_count():
    targets = torch.tensor([0, 1, 1, 2, 2, 2, 0])
    parts = [torch.tensor([0, 1, 2]), torch.tensor([3, 4]), torch.tensor([], dtype=torch.int64), torch.tensor([5, 6])]
    expected = torch.tensor([[1, 2, 0], [0, 0, 2], [0, 0, 0], [1, 0, 1]])
    assert torch.equal(label_counts(parts, targets, 3), expected)
    with pytest.raises(ValueError, match="outside 0..1"):
        label_counts(parts, targets, 2)


def test_label_report_csv(tmp_path):
    counts = torch.tensor([[1, 2, 0], [0, 0, 2]])
    write_label_report(counts, tmp_path / "labels.csv")
    assert (tmp_path / "labels.csv").read_text() == "client,class_0,class_1,class_2,total\n0,1,2,0,3\n1,0,0,2,2\n"
    write_label_report(counts, tmp_path / "named.csv", class_names=["cat", "dog", "eel"])
    assert (tmp_path / "named.csv").read_text().splitlines()[0] == "client,cat,dog,eel,total"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.csv", "named.csv"]  # no temp files left


@pytest.mark.parametrize("num_clients, fraction", [(10, False), (1000, True)])
def test_heatmap_is_a_valid_png(tmp_path, num_clients, fraction):
    from matplotlib.image import imread

    labels = torch.arange(10).repeat(num_clients * 3)
    counts = label_counts(client_dirichlet_partition(labels, num_clients, 0.1, 0, min_size=0), labels, 10)
    path = tmp_path / "heatmap.png"
    plot_label_heatmap(counts, path, title="Dir(0.1)", fraction=fraction)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and data.endswith(b"IEND\xaeB`\x82")
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert [p.name for p in tmp_path.iterdir()] == ["heatmap.png"]
