"""Figures of participation: a clients x rounds raster (FedAU Figure C.6.1) and the spread of p_n.

Drawn on matplotlib ``Figure`` objects with the Agg canvas (no pyplot, no display, no global state)
and written with :func:`fedhet.core.io.atomic_savefig`.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedhet.core.io import atomic_savefig
from fedhet.participation.simulate import simulate_participation

__all__ = ["plot_participation_raster", "plot_probability_histogram", "shown_clients",
           "simulate_participation"]


def shown_clients(num_clients: int, max_clients: int) -> torch.Tensor:
    """The clients a raster shows: all when ``N <= max_clients``, else ``max_clients`` ids evenly
    spaced over ``0 .. N-1`` (first and last included), so the subset spans the whole population."""
    if max_clients < 1:
        raise ValueError(f"max_clients must be >= 1, got {max_clients}")
    if num_clients <= max_clients:
        return torch.arange(num_clients)
    return torch.linspace(0, num_clients - 1, max_clients, dtype=torch.float64).round().long().unique()


def plot_participation_raster(matrix: torch.Tensor, path: str | os.PathLike, *, max_clients: int = 50,
                              clients: Optional[Sequence[int]] = None, title: Optional[str] = None,
                              first_round: int = 0) -> None:
    """Save a raster of ``matrix`` (``[T, N]`` bool, True = participated): clients down, rounds across.

    Shows the clients given in ``clients``, else those of :func:`shown_clients` (every client when
    ``N <= max_clients``). Each round is one column drawn without smoothing, so pass a window of at
    most a few thousand rounds (FedAU Figure C.6.1 shows 400); ``first_round`` labels its start.
    """
    if matrix.dim() != 2:
        raise ValueError(f"matrix must be [rounds, clients], got shape {tuple(matrix.shape)}")
    num_rounds, num_clients = matrix.shape
    ids = (torch.as_tensor(list(clients), dtype=torch.long) if clients is not None
           else shown_clients(num_clients, max_clients))
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= num_clients:
        raise ValueError(f"clients must be non-empty ids in [0, {num_clients})")
    rows = matrix.bool()[:, ids].T.to(torch.float32).numpy()          # [shown clients, T]

    figure = Figure(figsize=(10, max(2.0, min(12.0, 0.18 * len(ids) + 1.2))))
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    axes.imshow(rows, aspect="auto", cmap="Greys", vmin=0, vmax=1, interpolation="nearest",
                extent=(first_round - 0.5, first_round + num_rounds - 0.5, len(ids) - 0.5, -0.5))
    tick_step = max(1, len(ids) // 20)
    positions = list(range(0, len(ids), tick_step))
    axes.set_yticks(positions, [str(int(ids[i])) for i in positions])
    axes.set_xlabel("round")
    axes.set_ylabel("client")
    shown = f"{len(ids)} of {num_clients} clients" if len(ids) < num_clients else f"{num_clients} clients"
    axes.set_title(title or f"Participation ({shown}, black = participates)")
    figure.tight_layout()
    atomic_savefig(figure, path, dpi=120)


def plot_probability_histogram(probabilities: torch.Tensor, path: str | os.PathLike, *, bins: int = 40,
                               title: Optional[str] = None) -> None:
    """Save a histogram of the per-client participation probabilities ``p_n`` with their mean marked."""
    p = torch.as_tensor(probabilities, dtype=torch.float64).flatten()
    if p.numel() == 0:
        raise ValueError("no probabilities to plot")
    figure = Figure(figsize=(6, 4))
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    axes.hist(p.numpy(), bins=bins, range=(0.0, max(1e-9, float(p.max()))), color="0.4")
    mean = float(p.mean())
    axes.axvline(mean, color="tab:red", linestyle="--", label=f"mean {mean:.3f}")
    axes.set_xlabel("participation probability $p_n$")
    axes.set_ylabel("clients")
    axes.set_title(title or f"$p_n$ of {p.numel()} clients (min {float(p.min()):.3f}, max {float(p.max()):.3f})")
    axes.legend()
    figure.tight_layout()
    atomic_savefig(figure, path, dpi=120)
