"""``trace`` participation replays a hand-written trace exactly."""

import pytest
import torch

import fedhet.components  # noqa: F401
from fedhet.core.options import ConfigError, build_options
from fedhet.core.registry import PARTICIPATION
from fedhet.participation.base import ParticipationContext


def context(num_clients, seconds=None):
    return ParticipationContext(num_clients=num_clients, seed=3,
                                client_label_counts=torch.zeros(num_clients, 2, dtype=torch.int64),
                                virtual_seconds=seconds)


def make(path, **options):
    entry = PARTICIPATION.get("trace")
    return entry.factory(build_options(entry.options_cls, {"trace_file": str(path), **options}, section="participation"))


def test_every_available_client_at_each_time(tmp_path):
    path = tmp_path / "t.txt"
    # Plato form: client 1 on, off at 10, on at 20; client 2 off, on at 5; client 3 on, off at 7.
    path.write_text("1: on, [10, 20]\n2: off, [5]\n3: on, [7]\n")
    process = make(path)
    state = process.init(context(3))
    expected = {0: [0, 2], 5: [0, 1, 2], 7: [0, 1, 2], 8: [0, 1], 10: [0, 1], 15: [1], 20: [0, 1], 1e9: [0, 1]}
    for round_index, (seconds, ids) in enumerate(expected.items()):
        chosen, state = process.sample(state, round_index, context(3, float(seconds)))
        assert chosen.tolist() == ids, seconds


def test_k_of_the_available_is_seeded_by_round_and_never_an_unavailable_client(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("client,start,end\n" + "".join(f"{n},0,{'inf' if n % 2 else 1}\n" for n in range(10)))
    process = make(path, clients_per_round=3)
    state = process.init(context(10))
    for t in range(5):
        chosen, _ = process.sample(state, t, context(10, 2.0))
        again, _ = process.sample(state, t, context(10, 2.0))
        assert chosen.tolist() == again.tolist() and len(chosen) == 3
        assert all(n % 2 == 1 for n in chosen.tolist())


def test_probabilities_are_the_on_share_of_a_periodic_trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("client,start,end,period\n0,0,25,100\n1,10,60,100\n")
    process = make(path)
    assert process.probabilities(process.init(context(2))).tolist() == [0.25, 0.5]


def test_sampling_without_a_clock_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("client,start,end\n0,0,1\n")
    process = make(path)
    with pytest.raises(ConfigError, match="needs the virtual clock"):
        process.sample(process.init(context(1)), 0, context(1))
