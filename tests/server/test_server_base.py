"""Data-size weights p_i = n_i / sum n_j: values, dtype, and the device they are computed on."""
import torch

from fedhet.core.cohort import Cohort
from fedhet.server.base import data_size_weights


def _cohort(sizes, deltas):
    count = len(sizes)
    return Cohort(client_ids=torch.arange(count), deltas=deltas, num_examples=torch.tensor(sizes),
                  local_steps=torch.ones(count, dtype=torch.int64), train_loss=torch.zeros(count))


def test_data_size_weights_are_the_size_fractions_in_the_deltas_dtype():
    weights = data_size_weights(_cohort([100, 300], torch.zeros(2, 3, dtype=torch.float64)))
    assert weights.dtype == torch.float64
    assert weights.tolist() == [0.25, 0.75]


def test_data_size_weights_live_on_the_deltas_device():
    # Sizes are kept on the CPU while a GPU run's deltas are on the GPU; p @ deltas needs one device.
    # The meta device stands in for a GPU here (no data, but a real device distinct from the CPU).
    weights = data_size_weights(_cohort([100, 300], torch.empty(2, 3, device="meta")))
    assert weights.device.type == "meta"
