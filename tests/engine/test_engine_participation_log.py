"""The participation log: bit-packed rows, grown as rounds run, exact round trips."""
import torch

from fedhet.engine.participation_log import ParticipationLog


def test_rows_round_trip_through_growth_and_state():
    generator = torch.Generator().manual_seed(0)
    num_clients, rounds = 13, 37                  # not a multiple of 8; grows past 16 and 32 rows
    expected = torch.rand(rounds, num_clients, generator=generator) < 0.3
    log = ParticipationLog(num_clients)
    for row in expected:
        log.append(torch.nonzero(row).flatten())
    assert len(log) == rounds and torch.equal(log.dense(), expected)
    state = log.state_dict()
    assert state["packed"].shape == (rounds, 2) and state["packed"].dtype == torch.uint8
    again = ParticipationLog(num_clients)
    again.load_state_dict(state)
    again.append(torch.tensor([12]))
    assert torch.equal(again.dense()[:rounds], expected)
    assert again.dense()[rounds].nonzero().flatten().tolist() == [12]


def test_an_empty_log_is_zero_rows():
    log = ParticipationLog(5)
    assert log.dense().shape == (0, 5) and log.state_dict()["packed"].shape == (0, 1)
