"""Partitioners: pure seeded functions from training labels to per-client example indices.

Every partitioner returns ``list[torch.Tensor]``: one sorted int64 index tensor per client, disjoint
and (except where stated) covering every example. All randomness comes from
:func:`fedhet.core.seeding.numpy_generator` keyed by ``(seed, "partition/<name>", ...)``, so a seed
fixes the partition.

Registered in :data:`fedhet.core.registry.PARTITIONERS` as "iid", "dirichlet", "client-dirichlet",
"shards" and "natural" ("flwr", Flower Datasets' partitioners, is :mod:`fedhet.data.flower_partition`).
A registry factory is called as ``factory(options, *, targets, num_classes, seed, natural)`` where
``seed`` is the partition seed the engine resolved (``options.seed`` when set, else derived from
``run.seed``) and ``natural`` is the dataset's own client split (``DatasetBundle.client_indices``)
or ``None``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from fedhet.core.dataset import DatasetBundle
from fedhet.core.options import ConfigError, option
from fedhet.core.registry import PARTITIONERS
from fedhet.core.seeding import numpy_generator


def _labels_array(labels: torch.Tensor | np.ndarray | Sequence[int]) -> np.ndarray:
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {array.dtype}")
    if array.size and array.min() < 0:
        raise ValueError(f"labels must be >= 0, found {array.min()}")
    return array.astype(np.int64, copy=False)


def _check_clients(num_examples: int, num_clients: int, min_size: int = 1) -> None:
    if num_clients < 1:
        raise ValueError(f"num_clients = {num_clients}: must be >= 1")
    if num_examples < num_clients * min_size:
        raise ValueError(f"cannot give each of {num_clients} clients at least {min_size} example(s): "
                         f"only {num_examples} examples (need num_clients * min_size <= {num_examples})")


def _groups_from_owner(owner: np.ndarray, num_clients: int) -> list[torch.Tensor]:
    """Per-client sorted index tensors from ``owner[i]`` = the client holding example ``i``."""
    # A stable sort by owner keeps each client's indices in increasing order.
    order = np.argsort(owner, kind="stable")
    sizes = np.bincount(owner, minlength=num_clients)
    return [torch.from_numpy(part.astype(np.int64)) for part in np.split(order, np.cumsum(sizes)[:-1])]


def iid_partition(num_examples: int, num_clients: int, seed: int) -> list[torch.Tensor]:
    """A uniformly random split into ``num_clients`` parts whose sizes differ by at most one."""
    _check_clients(num_examples, num_clients)
    permutation = numpy_generator(seed, "partition/iid").permutation(num_examples)
    return [torch.from_numpy(np.sort(part).astype(np.int64)) for part in np.array_split(permutation, num_clients)]


def _label_dirichlet_draw(class_pools: list[np.ndarray], num_examples: int, num_clients: int, alpha: float,
                          rng: np.random.Generator, quota: bool) -> np.ndarray:
    """One draw of the label-Dirichlet rule; returns ``owner`` [num_examples]."""
    owner = np.empty(num_examples, dtype=np.int64)
    sizes = np.zeros(num_clients, dtype=np.int64)
    for pool in class_pools:
        shuffled = rng.permutation(pool)
        proportions = rng.dirichlet(np.full(num_clients, alpha))
        if quota:
            # Clients already holding their fair share n/N get no more (Yurochkin et al. 2019).
            capped = proportions * (sizes < num_examples / num_clients)
            # With tiny alpha the mass can sit entirely on full clients; then keep the raw draw.
            if capped.sum() > 0:
                proportions = capped / capped.sum()
        cuts = (np.cumsum(proportions) * len(pool)).astype(np.int64)[:-1]
        counts = np.diff(np.concatenate(([0], cuts, [len(pool)])))
        owner[shuffled] = np.repeat(np.arange(num_clients), counts)
        sizes += counts
    return owner


def _balanced_dirichlet_owner(labels: np.ndarray, num_clients: int, alpha: float,
                              rng: np.random.Generator) -> np.ndarray:
    """Equal client sizes, client label mixes ``q_i ~ Dir(alpha 1_C)``; returns ``owner``.

    Examples are dealt one per unfilled client per round (clients in a fresh random order each
    round); each client draws a class from ``q_i`` renormalised over the classes with examples left
    (uniform over those classes when ``q_i`` puts no mass there). When more clients ask for a class
    than it has examples left, the first in the round's order get them and the rest retry next
    round. This adapts the sequential sampler of the FedDyn code (Acar et al. 2021), which deals one
    example at a time to a random unfilled client, to rounds of numpy operations.
    """
    num_examples = len(labels)
    classes, class_sizes = np.unique(labels, return_counts=True)
    # Examples grouped by class (in class order), shuffled within each class.
    shuffled = rng.permutation(num_examples)
    by_class = shuffled[np.argsort(np.searchsorted(classes, labels[shuffled]), kind="stable")]
    class_start = np.concatenate(([0], np.cumsum(class_sizes)[:-1]))
    left = class_sizes.copy()
    need = np.full(num_clients, num_examples // num_clients, dtype=np.int64)
    need[: num_examples % num_clients] += 1
    mixes = rng.dirichlet(np.full(len(classes), alpha), size=num_clients)
    owner = np.empty(num_examples, dtype=np.int64)

    while need.any():
        clients = rng.permutation(np.flatnonzero(need))
        available = left > 0
        weights = mixes[clients] * available
        empty = weights.sum(axis=1) == 0
        weights[empty] = available
        weights /= weights.sum(axis=1, keepdims=True)
        # Inverse-CDF draw of one class per client.
        draws = (weights.cumsum(axis=1) < rng.random((len(clients), 1))).sum(axis=1)
        draws = np.minimum(draws, len(classes) - 1)
        # Rank of each client among this round's claimants of its class, in the round's order.
        order = np.argsort(draws, kind="stable")
        claimed = draws[order]
        first = np.searchsorted(claimed, claimed, side="left")
        rank = np.arange(len(claimed)) - first
        granted = rank < left[claimed]
        winners, won_class, won_rank = clients[order][granted], claimed[granted], rank[granted]
        taken = class_start[won_class] + (class_sizes[won_class] - left[won_class]) + won_rank
        owner[by_class[taken]] = winners
        need[winners] -= 1
        left -= np.bincount(won_class, minlength=len(classes))
    return owner


def _redraw_until_min_size(draw: Callable[[np.random.Generator], np.ndarray], *, num_clients: int, min_size: int,
                           max_retries: int, seed: int, purpose: str) -> list[torch.Tensor]:
    """Call ``draw(rng)`` (an ``owner`` array) with a fresh stream per attempt until every client has
    ``min_size`` examples; a ``ValueError`` says what to change after ``max_retries`` failures."""
    smallest = -1
    for attempt in range(max_retries):
        owner = draw(numpy_generator(seed, purpose, attempt))
        least = int(np.bincount(owner, minlength=num_clients).min())
        if least >= min_size:
            return _groups_from_owner(owner, num_clients)
        smallest = max(smallest, least)
    raise ValueError(f"{purpose.removeprefix('partition/')} partition: none of {max_retries} draws gave all {num_clients} clients at least "
                     f"min_size = {min_size} examples (the best draw's smallest client had {smallest}); lower "
                     "min_size, raise alpha, use fewer clients, or use balanced = true or the client-dirichlet "
                     "partitioner")


def _check_dirichlet_args(labels: np.ndarray, num_clients: int, alpha: float, min_size: int) -> None:
    if not alpha > 0:
        raise ValueError(f"alpha = {alpha}: the Dirichlet concentration must be > 0")
    if min_size < 0:
        raise ValueError(f"min_size = {min_size}: must be >= 0")
    _check_clients(len(labels), num_clients, max(min_size, 1))


def dirichlet_partition(labels: torch.Tensor | np.ndarray | Sequence[int], num_clients: int, alpha: float,
                        seed: int, *, min_size: int = 10, max_retries: int = 1000, balanced: bool = False,
                        quota: bool = True) -> list[torch.Tensor]:
    """Label-Dirichlet partition (Hsu, Qi, Brown 2019, "Measuring the Effects of Non-Identical Data
    Distribution for Federated Visual Classification").

    Default (``balanced=False``): for each class ``c``, draw ``p_c ~ Dir(alpha 1_N)`` and give
    client ``i`` the share ``p_{c,i}`` of class ``c``'s (shuffled) examples, so client sizes vary.
    With ``quota=True`` (the "hetero-dir" rule of Yurochkin et al. 2019, used by FedLab and
    NIID-Bench, hence by the FedAWARE authors' experiments), clients that already hold at least
    ``n/N`` examples get no share of later classes, which makes draws with many clients far more
    likely to meet ``min_size``. The whole draw is repeated (a fresh stream per attempt) until every
    client has at least ``min_size`` examples; after ``max_retries`` failures a ``ValueError`` says
    what to change. (N = 250, alpha = 0.1 on 60,000 examples needs min_size below 10; see
    :func:`client_dirichlet_partition` for FedAU's rule, which suits that setting.)

    ``balanced=True``: every client gets ``n // N`` or ``n // N + 1`` examples and a label mix
    ``q_i ~ Dir(alpha 1_C)`` over classes, filled as in the FedDyn code (see
    :func:`_balanced_dirichlet_owner`); ``min_size`` only has to be at most ``n // N``.
    """
    labels = _labels_array(labels)
    _check_dirichlet_args(labels, num_clients, alpha, min_size)
    if balanced:
        owner = _balanced_dirichlet_owner(labels, num_clients, alpha, numpy_generator(seed, "partition/dirichlet-balanced"))
        return _groups_from_owner(owner, num_clients)
    class_pools = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    return _redraw_until_min_size(
        lambda rng: _label_dirichlet_draw(class_pools, len(labels), num_clients, alpha, rng, quota),
        num_clients=num_clients, min_size=min_size, max_retries=max_retries, seed=seed, purpose="partition/dirichlet")


def _client_mix_draw(class_pools: list[np.ndarray], num_examples: int, num_clients: int, alpha: float,
                     rng: np.random.Generator) -> np.ndarray:
    """One draw of FedAU's rule; returns ``owner`` [num_examples]."""
    mixes = rng.dirichlet(np.full(len(class_pools), alpha), size=num_clients)    # [N, C], rows q_i
    owner = np.empty(num_examples, dtype=np.int64)
    for c, pool in enumerate(class_pools):
        shares = mixes[:, c] / mixes[:, c].sum()
        ends = np.rint(np.cumsum(shares) * len(pool)).astype(np.int64)
        ends[-1] = len(pool)
        counts = np.diff(np.concatenate(([0], ends)))
        owner[rng.permutation(pool)] = np.repeat(np.arange(num_clients), counts)
    return owner


def client_dirichlet_partition(labels: torch.Tensor | np.ndarray | Sequence[int], num_clients: int, alpha: float,
                               seed: int, *, min_size: int = 10, max_retries: int = 1000) -> list[torch.Tensor]:
    """Label mixes drawn per client, as in the FedAU code (Wang and Ji, "A Lightweight Method for
    Tackling Unknown Participation Statistics in Federated Averaging", ICLR 2024, Section 5 and
    ``util/util.py::partition``).

    Draw ``q_i ~ Dir(alpha 1_C)`` for every client ``i``; class ``c``'s (shuffled) examples go to
    the clients in proportion to ``q_{i,c} / sum_j q_{j,c}`` (cut points rounded to the nearest
    integer). Client sizes stay near ``n / N`` because every ``q_i`` sums to one, so ``min_size``
    (enforced by redrawing, which FedAU's code does not do) is rarely binding.
    """
    labels = _labels_array(labels)
    _check_dirichlet_args(labels, num_clients, alpha, min_size)
    class_pools = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    return _redraw_until_min_size(
        lambda rng: _client_mix_draw(class_pools, len(labels), num_clients, alpha, rng),
        num_clients=num_clients, min_size=min_size, max_retries=max_retries, seed=seed,
        purpose="partition/client-dirichlet")


def shard_partition(labels: torch.Tensor | np.ndarray | Sequence[int], num_clients: int, shards_per_client: int,
                    seed: int) -> list[torch.Tensor]:
    """Pathological label skew of McMahan et al. 2017 ("Communication-Efficient Learning of Deep
    Networks from Decentralized Data", Section 3): sort the examples by label (stable, so ties keep
    index order), cut them into ``num_clients * shards_per_client`` contiguous shards (sizes differ
    by at most one when they do not divide ``n``), and give each client ``shards_per_client`` shards
    chosen by a random permutation. MNIST with 100 clients and 2 shards each: 200 shards of 300.
    """
    labels = _labels_array(labels)
    if shards_per_client < 1:
        raise ValueError(f"shards_per_client = {shards_per_client}: must be >= 1")
    if num_clients < 1:
        raise ValueError(f"num_clients = {num_clients}: must be >= 1")
    num_shards = num_clients * shards_per_client
    if num_shards > len(labels):
        raise ValueError(f"{num_clients} clients x {shards_per_client} shards = {num_shards} shards, more than the "
                         f"{len(labels)} examples")
    shards = np.array_split(np.argsort(labels, kind="stable"), num_shards)
    shard_order = numpy_generator(seed, "partition/shards").permutation(num_shards).reshape(num_clients, shards_per_client)
    return [torch.from_numpy(np.sort(np.concatenate([shards[s] for s in row])).astype(np.int64)) for row in shard_order]


def natural_partition(bundle: DatasetBundle) -> list[torch.Tensor]:
    """The dataset's own clients (Synthetic devices, FEMNIST writers): ``bundle.client_indices``."""
    if bundle.client_indices is None:
        raise ValueError(f"dataset {bundle.name!r} has no natural partition; use iid, dirichlet or shards")
    return _checked_natural(bundle.client_indices, len(bundle.train))


def _checked_natural(client_indices: Sequence[torch.Tensor], num_examples: int) -> list[torch.Tensor]:
    parts = [torch.sort(torch.as_tensor(part, dtype=torch.int64)).values for part in client_indices]
    if parts:
        every = torch.cat(parts)
        if len(every) and (int(every.min()) < 0 or int(every.max()) >= num_examples):
            raise ValueError(f"natural partition indexes outside the {num_examples} training examples")
        if len(torch.unique(every)) != len(every):
            raise ValueError("natural partition: clients share examples (indices must be disjoint)")
    return parts


# ---------------------------------------------------------------------------------------------
# Registry entries: option dataclasses and factories.


@dataclasses.dataclass(frozen=True)
class PartitionOptions:
    """Options every partitioner shares."""

    num_clients: int = option(100, help="number of clients N", symbol="N", ge=1)
    seed: Optional[int] = option(None, help="partition seed; none derives it from run.seed")


@dataclasses.dataclass(frozen=True)
class IidOptions(PartitionOptions):
    pass


@dataclasses.dataclass(frozen=True)
class DirichletOptions(PartitionOptions):
    alpha: float = option(0.5, help="Dirichlet concentration; smaller is more skewed", symbol="alpha", gt=0)
    min_size: int = option(10, help="redraw until every client has at least this many examples", ge=0)
    balanced: bool = option(False, help="equal client sizes with Dir(alpha) label mixes (instead of "
                                        "Dir(alpha) shares of each class)")


@dataclasses.dataclass(frozen=True)
class ClientDirichletOptions(PartitionOptions):
    alpha: float = option(0.1, help="Dirichlet concentration of each client's label mix", symbol="alpha", gt=0)
    min_size: int = option(10, help="redraw until every client has at least this many examples", ge=0)


@dataclasses.dataclass(frozen=True)
class ShardOptions(PartitionOptions):
    shards_per_client: int = option(2, help="label-sorted shards per client (McMahan 2017)", ge=1)


@dataclasses.dataclass(frozen=True)
class NaturalOptions:
    num_clients: Optional[int] = option(None, help="none: all of the dataset's natural clients; a number must "
                                                   "equal their count", symbol="N", ge=1)
    seed: Optional[int] = option(None, help="unused (the natural partition is fixed by the dataset)")


def _seed(options: PartitionOptions | NaturalOptions, seed: int) -> int:
    # The engine passes the resolved seed; honour an explicit options.seed either way.
    return options.seed if options.seed is not None else seed


def checked_labels(targets: torch.Tensor, num_classes: int) -> np.ndarray:
    """The targets as a label array, checked to lie below ``num_classes``."""
    labels = _labels_array(targets)
    if labels.size and labels.max() >= num_classes:
        raise ValueError(f"targets range up to {labels.max()}, but the dataset has {num_classes} classes")
    return labels


def _require_examples(key: str, value: int, needed: int, num_examples: int, rule: str) -> None:
    if needed > num_examples:
        raise ConfigError(f"partition.{key}", value, f"needs {rule} = {needed} <= {num_examples} training examples")


@PARTITIONERS.register("iid", IidOptions)
def make_iid_partition(options: IidOptions, *, targets: torch.Tensor, num_classes: int, seed: int,
                       natural: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """IID: a random equal split (sizes differ by at most one)."""
    _require_examples("num_clients", options.num_clients, options.num_clients, len(targets), "num_clients")
    return iid_partition(len(targets), options.num_clients, _seed(options, seed))


@PARTITIONERS.register("dirichlet", DirichletOptions)
def make_dirichlet_partition(options: DirichletOptions, *, targets: torch.Tensor, num_classes: int, seed: int,
                             natural: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """Label-Dirichlet (Hsu et al. 2019): each class split over clients by Dir(alpha) shares."""
    labels = checked_labels(targets, num_classes)
    _require_examples("num_clients", options.num_clients, options.num_clients * max(options.min_size, 1), len(labels),
                      "num_clients * max(min_size, 1)")
    return dirichlet_partition(labels, options.num_clients, options.alpha, _seed(options, seed),
                               min_size=options.min_size, balanced=options.balanced)


@PARTITIONERS.register("client-dirichlet", ClientDirichletOptions)
def make_client_dirichlet_partition(options: ClientDirichletOptions, *, targets: torch.Tensor, num_classes: int,
                                    seed: int, natural: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """Per-client Dir(alpha) label mixes, classes split in proportion (FedAU's code)."""
    labels = checked_labels(targets, num_classes)
    _require_examples("num_clients", options.num_clients, options.num_clients * max(options.min_size, 1), len(labels),
                      "num_clients * max(min_size, 1)")
    return client_dirichlet_partition(labels, options.num_clients, options.alpha, _seed(options, seed),
                                      min_size=options.min_size)


@PARTITIONERS.register("shards", ShardOptions)
def make_shard_partition(options: ShardOptions, *, targets: torch.Tensor, num_classes: int, seed: int,
                         natural: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """Pathological shards (McMahan et al. 2017): label-sorted shards, shards_per_client each."""
    labels = checked_labels(targets, num_classes)
    _require_examples("num_clients", options.num_clients, options.num_clients * options.shards_per_client,
                      len(labels), "num_clients * shards_per_client")
    return shard_partition(labels, options.num_clients, options.shards_per_client, _seed(options, seed))


@PARTITIONERS.register("natural", NaturalOptions)
def make_natural_partition(options: NaturalOptions, *, targets: torch.Tensor, num_classes: int, seed: int,
                           natural: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """The dataset's own clients (Synthetic devices, FEMNIST writers)."""
    if natural is None:
        raise ConfigError("partition.name", "natural", "this dataset has no natural partition; "
                          "allowed: iid, dirichlet, shards")
    if options.num_clients is not None and options.num_clients != len(natural):
        raise ConfigError("partition.num_clients", options.num_clients,
                          f"the dataset has {len(natural)} natural clients; leave num_clients unset or set it "
                          f"to {len(natural)}")
    return _checked_natural(natural, len(targets))
