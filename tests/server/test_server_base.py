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


def test_every_registered_server_method_satisfies_the_server_method_protocol():
    """What the simulator's ``server: ServerMethod`` asks, built as a run builds it (with the solver an
    ``algorithm`` pairs it with, for the methods built from their client's options)."""
    import fedhet.components  # noqa: F401  (registers every server method)
    from fedhet.algorithms import build_parts
    from fedhet.core.options import build_options
    from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, SERVERS
    from fedhet.server.base import ServerMethod

    for name in SERVERS.names():
        client = next((pair.client for pair in ALGORITHMS.values() if pair.server == name), "sgd")
        client_options = build_options(CLIENT_SOLVERS.get(client).options_cls, {}, section="client")
        server_options = build_options(SERVERS.get(name).options_cls, {}, section="server")
        _, server = build_parts(client, client_options, name, server_options)
        assert isinstance(server, ServerMethod), name

    class StepOnly:
        def step(self, state, params, cohort, context):
            return params, state, {}

    assert not isinstance(StepOnly(), ServerMethod)
