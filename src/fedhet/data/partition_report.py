"""What a partition looks like: per-client label counts, as a CSV table and as a heat map.

``label_counts`` gives the ``[N, C]`` matrix ``counts[i, c]`` = examples of class ``c`` on client
``i``; the participation processes (e.g. FedAU's Dirichlet participation) and the run report use
it, :func:`write_label_report` saves it as CSV and :func:`plot_label_heatmap` draws it.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import torch

from fedhet.core.io import atomic_savefig, atomic_write_text


def label_counts(partition: Sequence[torch.Tensor], targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``[N, C]`` int64: ``counts[i, c]`` = number of indices in ``partition[i]`` whose target is ``c``."""
    targets = torch.as_tensor(targets).to(torch.int64).cpu()
    num_clients = len(partition)
    if num_clients == 0:
        return torch.zeros(0, num_classes, dtype=torch.int64)
    indices = torch.cat([torch.as_tensor(part, dtype=torch.int64).cpu() for part in partition])
    # np.repeat: torch.repeat_interleave has a large fixed cost on CPU even for tiny inputs.
    owners = torch.from_numpy(np.repeat(np.arange(num_clients, dtype=np.int64), [len(part) for part in partition]))
    labels = targets[indices]
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"targets range over {int(labels.min())}..{int(labels.max())}, outside 0..{num_classes - 1}")
    # One bincount over (client, class) pairs instead of a Python loop over clients.
    flat = torch.bincount(owners * num_classes + labels, minlength=num_clients * num_classes)
    return flat.view(num_clients, num_classes)


def write_label_report(counts: torch.Tensor, path: str | os.PathLike,
                       class_names: Optional[Sequence[str]] = None) -> None:
    """CSV with header ``client,<class 0>,...,<class C-1>,total`` and one row per client, atomically.

    Column names are ``class_<c>`` unless ``class_names`` is given.
    """
    counts = torch.as_tensor(counts).to(torch.int64)
    if counts.dim() != 2:
        raise ValueError(f"counts must be [clients, classes], got shape {tuple(counts.shape)}")
    num_classes = counts.shape[1]
    names = list(class_names) if class_names is not None else [f"class_{c}" for c in range(num_classes)]
    if len(names) != num_classes:
        raise ValueError(f"{len(names)} class names for {num_classes} classes")
    if any("," in name or '"' in name for name in names):
        raise ValueError("class names must not contain commas or quotes (they are CSV column names)")
    lines = [",".join(["client", *names, "total"])]
    for client, row in enumerate(counts.tolist()):
        lines.append(",".join(str(v) for v in (client, *row, sum(row))))
    atomic_write_text(path, "\n".join(lines) + "\n")


def plot_label_heatmap(counts: torch.Tensor, path: str | os.PathLike, *, title: str = "Examples per client and class",
                       fraction: bool = False) -> None:
    """Save a clients (x axis) by classes (y axis) heat map of ``counts`` (PNG/PDF/SVG by suffix).

    ``fraction=True`` colours each client's column by its label distribution instead of counts.
    The figure width grows with the number of clients up to a cap and the tick labels thin out,
    so 10 to 1000 clients stay readable. Uses matplotlib's Agg canvas directly (no pyplot state,
    no display needed).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    counts = torch.as_tensor(counts).to(torch.int64).cpu()
    if counts.dim() != 2 or counts.shape[0] == 0 or counts.shape[1] == 0:
        raise ValueError(f"counts must be a non-empty [clients, classes] matrix, got shape {tuple(counts.shape)}")
    num_clients, num_classes = counts.shape
    values = counts.to(torch.float64)
    if fraction:
        values = values / values.sum(dim=1, keepdim=True).clamp_min(1)
    width = min(4.0 + 0.12 * num_clients, 18.0)
    height = min(2.0 + 0.3 * num_classes, 12.0)
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(values.T.numpy(), aspect="auto", interpolation="nearest", cmap="viridis", origin="lower")
    axes.set_xlabel("client")
    axes.set_ylabel("class")
    axes.set_title(title)
    axes.xaxis.set_major_locator(MaxNLocator(nbins=20, integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(nbins=min(num_classes, 20), integer=True))
    if num_clients * num_classes <= 300 and not fraction:
        # Small matrices: print the counts in the cells too.
        threshold = values.max().item() / 2
        for client in range(num_clients):
            for cls in range(num_classes):
                value = int(counts[client, cls])
                axes.text(client, cls, str(value), ha="center", va="center", fontsize=6,
                          color="black" if value > threshold else "white")
    figure.colorbar(image, ax=axes, label="fraction of client's examples" if fraction else "examples")
    atomic_savefig(figure, path, dpi=120)
