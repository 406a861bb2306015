"""Resuming from a checkpointed participation state continues exactly as the uninterrupted run."""
import io

import numpy as np
import pytest
import torch

from fedhet.engine import checkpoint as ckpt
from fedhet.participation.base import ParticipationContext
from fedhet.participation.bernoulli import BernoulliOptions, make_bernoulli
from fedhet.participation.full import FullOptions, make_full
from fedhet.participation.heterogeneous import HeterogeneousOptions, make_heterogeneous
from fedhet.participation.uniform import UniformOptions, make_uniform

CONFIGS = {
    "uniform": lambda **w: make_uniform(UniformOptions(clients_per_round=4, **w)),
    "bernoulli": lambda **w: make_bernoulli(BernoulliOptions(ratio=0.15, **w)),
    "full": lambda **w: make_full(FullOptions(**w)),
    "heterogeneous-bernoulli": lambda **w: make_heterogeneous(HeterogeneousOptions(pattern="bernoulli", **w)),
    "heterogeneous-markov": lambda **w: make_heterogeneous(HeterogeneousOptions(pattern="markov", **w)),
    "heterogeneous-cyclic": lambda **w: make_heterogeneous(HeterogeneousOptions(pattern="cyclic", cycle=7, **w)),
}
WARMUPS = [{}, {"explore": True}, {"startup_round": True}]


def label_context(num_clients=30, seed=11):
    rng = np.random.default_rng(seed)
    counts = np.round(rng.dirichlet([0.1] * 10, num_clients) * 200).astype(np.int64)
    counts[np.arange(num_clients), rng.integers(0, 10, num_clients)] += 1
    counts = torch.from_numpy(counts)
    return ParticipationContext(num_clients, seed, counts)


def assert_plain(saved):
    """``saved`` (a state as a checkpoint writes it) holds only str-keyed dicts, tensors and numbers."""
    for key, value in saved.items():
        assert isinstance(key, str)
        if isinstance(value, dict):                       # a nested typed state (the warm-up's inner one)
            assert_plain(value)
            continue
        assert isinstance(value, (torch.Tensor, int, float, str)) and not isinstance(value, bool), (key, value)


def run(process, state, first, last, ctx):
    out = []
    for t in range(first, last):
        ids, state = process.sample(state, t, ctx)
        out.append(ids)
    return out, state


@pytest.mark.parametrize("warmup", WARMUPS, ids=["plain", "explore", "startup"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_resume_from_saved_state_equals_uninterrupted_run(name, warmup):
    ctx = label_context()
    process = CONFIGS[name](**warmup)
    state = process.init(ctx)
    assert_plain(ckpt.to_saveable(state))
    whole, _ = run(process, state, 0, 40, ctx)

    head, state = run(process, process.init(ctx), 0, 17, ctx)
    buffer = io.BytesIO()
    torch.save(ckpt.to_saveable(state), buffer)            # as the engine's checkpoints write it
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=True)       # plain tensors and numbers only
    assert_plain(restored)
    # A fresh process object (as after a restart) with the same options; the typed state is rebuilt
    # from its fresh initial state, as the engine does.
    fresh = CONFIGS[name](**warmup)
    resumed = ckpt.restore(fresh.init(ctx), restored, "cpu")
    assert type(resumed) is type(state)
    tail, _ = run(fresh, resumed, 17, 40, ctx)
    assert all(torch.equal(a, b) for a, b in zip(whole, head + tail))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sampling_does_not_mutate_the_given_state(name):
    ctx = label_context()
    process = CONFIGS[name]()
    state = process.init(ctx)
    snapshot = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state._asdict().items()}
    process.sample(state, 0, ctx)
    fields = state._asdict()
    assert fields.keys() == snapshot.keys()
    for key, value in snapshot.items():
        assert torch.equal(fields[key], value) if isinstance(value, torch.Tensor) else fields[key] == value
