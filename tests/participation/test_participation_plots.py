"""Participation figures are written as PNG files."""
import numpy as np
import pytest
import torch

from fedhet.participation.base import ParticipationContext
from fedhet.participation.heterogeneous import HeterogeneousOptions, make_heterogeneous
from fedhet.participation.plots import (
    plot_participation_raster,
    plot_probability_histogram,
    shown_clients,
    simulate_participation,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def label_context(num_clients, seed=0):
    rng = np.random.default_rng(seed)
    counts = np.round(rng.dirichlet([0.1] * 10, num_clients) * 200).astype(np.int64)
    counts[np.arange(num_clients), rng.integers(0, 10, num_clients)] += 1
    counts = torch.from_numpy(counts)
    return ParticipationContext(num_clients, seed, counts)


def test_shown_clients_is_everyone_or_an_even_spread():
    assert torch.equal(shown_clients(30, 50), torch.arange(30))
    ids = shown_clients(1000, 50)
    assert len(ids) == 50 and int(ids[0]) == 0 and int(ids[-1]) == 999
    assert torch.all(ids[1:] > ids[:-1])
    with pytest.raises(ValueError, match="max_clients"):
        shown_clients(10, 0)


def test_raster_and_histogram_pngs_are_written(tmp_path):
    ctx = label_context(250)
    process = make_heterogeneous(HeterogeneousOptions(pattern="cyclic"))
    matrix = simulate_participation(process, ctx, 400)
    raster = tmp_path / "figs" / "raster.png"
    plot_participation_raster(matrix, raster, max_clients=40, title="cyclic")
    histogram = tmp_path / "p.png"
    plot_probability_histogram(process.probabilities(process.init(ctx)), histogram)
    for path in (raster, histogram):
        assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert not list(tmp_path.rglob("*.tmp"))                  # atomic write left no temporary file
    chosen = tmp_path / "chosen.png"
    plot_participation_raster(matrix, chosen, clients=[0, 5, 7])
    assert chosen.read_bytes()[:8] == PNG_SIGNATURE


def test_raster_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match=r"\[rounds, clients\]"):
        plot_participation_raster(torch.zeros(5, dtype=torch.bool), tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"ids in \[0, 4\)"):
        plot_participation_raster(torch.zeros(5, 4, dtype=torch.bool), tmp_path / "x.png", clients=[4])
