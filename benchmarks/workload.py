"""Workload W of the speed issue, shared by every implementation in this directory.

Fashion-MNIST, 100 clients IID (600 examples each), 10 clients per round, 30 rounds, plain SGD with
learning rate 0.05, batch 32, one local epoch (ceil(600 / 32) = 19 steps, the last batch 24
examples), FedAvg weighted by data size, evaluation on the 10,000 test images after every round in
batches of 1000. Models: the FedAvg MLP 784-200-200-10 and the FedAvg CNN (conv 1->32 5x5 pad 2,
max-pool 2, conv 32->64 5x5 pad 2, max-pool 2, fc 3136->512, fc 512->10), ReLU activations.

This module needs only numpy and torch (the peers' environment has no fedhet). Each
implementation prints one line ``RESULT {json}`` with at least ``wall_seconds`` (the training and
evaluation loop: from just before round 1 to the end of the last evaluation, after the data is in
memory), ``rounds``, ``final_accuracy`` and ``final_loss``.
"""
from __future__ import annotations

import gzip
import json
import os
import struct
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NUM_CLIENTS = 100
CLIENT_SIZE = 600
CLIENTS_PER_ROUND = 10
ROUNDS = 30
LEARNING_RATE = 0.05
BATCH_SIZE = 32
LOCAL_EPOCHS = 1
EVAL_BATCH = 1000
FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
SEED = 1


def data_dir() -> Path:
    return Path(os.environ.get("FEDHET_BENCH_DATA", DEFAULT_DATA_DIR))


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip or raw) as a numpy array (the MNIST format: magic, dims, big-endian)."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(stem: str) -> Path:
    for name in (stem + ".gz", stem):
        if (data_dir() / name).exists():
            return data_dir() / name
    raise FileNotFoundError(f"{stem}(.gz) not found in {data_dir()}; install the Debian package "
                            f"dataset-fashion-mnist or set FEDHET_BENCH_DATA")


def load_fmnist() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(train_x [60000,1,28,28] float32 normalised, train_y int64, test_x, test_y)``."""
    def images(stem):
        array = read_idx(find(stem)).astype(np.float32) / 255.0
        return torch.from_numpy((array - FMNIST_MEAN) / FMNIST_STD).unsqueeze(1)

    def labels(stem):
        return torch.from_numpy(read_idx(find(stem)).astype(np.int64))

    return (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
            images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte"))


def iid_partition(seed: int = SEED) -> list[np.ndarray]:
    """100 disjoint random subsets of 600 training indices."""
    order = np.random.default_rng(seed).permutation(NUM_CLIENTS * CLIENT_SIZE)
    return [order[i * CLIENT_SIZE:(i + 1) * CLIENT_SIZE] for i in range(NUM_CLIENTS)]


def sample_clients(round_index: int, seed: int = SEED) -> list[int]:
    """The 10 clients of a round, uniformly without replacement, sorted."""
    rng = np.random.default_rng([seed, round_index])
    return sorted(rng.choice(NUM_CLIENTS, CLIENTS_PER_ROUND, replace=False).tolist())


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 200), nn.Linear(200, 200), nn.Linear(200, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1, self.fc2 = nn.Linear(3136, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_model(name: str) -> nn.Module:
    torch.manual_seed(SEED)
    if name == "mlp":
        return MLP()
    if name == "cnn":
        return CNN()
    raise ValueError(f"unknown model {name!r}; allowed: mlp, cnn")


@torch.inference_mode()
def evaluate(model: nn.Module, test_x: torch.Tensor, test_y: torch.Tensor) -> tuple[float, float]:
    """Mean cross-entropy and accuracy on the test set, in batches of EVAL_BATCH."""
    model.eval()
    loss, correct = 0.0, 0
    for start in range(0, len(test_y), EVAL_BATCH):
        logits = model(test_x[start:start + EVAL_BATCH])
        targets = test_y[start:start + EVAL_BATCH]
        loss += float(F.cross_entropy(logits, targets, reduction="sum"))
        correct += int((logits.argmax(1) == targets).sum())
    model.train()
    return loss / len(test_y), correct / len(test_y)


def warm_up_torch() -> None:
    """Run one torch.optim.SGD step on a toy model: torch imports its compiler stack lazily the first
    time an optimizer is built (2 s here), which must not land inside any implementation's clock."""
    layer = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(torch.zeros(1, 2)).sum().backward()
    optimizer.step()


def startup_seconds() -> float | None:
    """Seconds since the launching benchmark started this process (it sets ``FEDHET_BENCH_LAUNCH``
    to its ``time.time()`` just before the launch; benchmarks/bench_startup.py), else None. Called
    just before round 1, it is the process's start-up: interpreter, imports, data, partition, model."""
    launched = os.environ.get("FEDHET_BENCH_LAUNCH")
    return time.time() - float(launched) if launched else None


def startup_cpu_seconds() -> float:
    """CPU seconds (user + system, all threads) this process has used so far: the start-up's cost
    measured in a way a busy machine disturbs less than wall time."""
    return time.process_time()


def emit(result: dict) -> None:
    print("RESULT " + json.dumps(result), flush=True)
