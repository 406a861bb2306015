"""The latest-update table's running sum (server/latest_updates.py): the column-blocked change is
bitwise the whole-width float64 expression it replaces."""
import pytest
import torch

from fedhet.server import latest_updates
from fedhet.server.latest_updates import change_of_rows


def whole_width(new_rows, old_rows):
    return (new_rows.to(torch.float64) - old_rows.to(torch.float64)).sum(dim=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("rows", [1, 3, 10, 33])
@pytest.mark.parametrize("block_values", [64, 1000, 1 << 17])
def test_blocked_change_is_bitwise_the_whole_width_sum(monkeypatch, dtype, rows, block_values):
    monkeypatch.setattr(latest_updates, "_SUM_BLOCK_VALUES", block_values)
    generator = torch.Generator().manual_seed(rows)
    for dim in (1, 63, 4099, 70001):
        # Rows of very different scales, so the float64 sums round and their order shows.
        new = (torch.randn(rows, dim, generator=generator) * torch.logspace(-3, 6, rows)[:, None]).to(dtype)
        old = torch.randn(rows, dim, generator=generator).to(dtype)
        got = change_of_rows(new, old)
        assert got.dtype == torch.float64 and torch.equal(got, whole_width(new, old)), (dim, rows)
    # The inputs are left as they were (a float64 row block is a view, not a copy).
    before = new.clone()
    change_of_rows(new, old)
    assert torch.equal(new, before)


def test_an_empty_cohort_changes_nothing():
    assert torch.equal(change_of_rows(torch.zeros(0, 5), torch.zeros(0, 5)), torch.zeros(5, dtype=torch.float64))
