"""data.validation_fraction: a seeded split taken out of the training set before partitioning."""
import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.data.validation import split_validation


def _bundle(n=50, natural=False):
    inputs = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    clients = [torch.arange(i, n, 5) for i in range(5)] if natural else None
    return DatasetBundle("toy", TensorDataset(inputs, torch.arange(n) % 3), TensorDataset(inputs[:4], torch.zeros(4, dtype=torch.long)),
                         num_classes=3, input_shape=(1,), client_indices=clients)


def test_split_is_disjoint_complete_and_seeded():
    train, validation = split_validation(_bundle(), 0.2, seed=3)
    kept, held = set(train.train.inputs.flatten().tolist()), set(validation.inputs.flatten().tolist())
    assert len(held) == 10 and not kept & held and kept | held == set(range(50))
    assert torch.equal(split_validation(_bundle(), 0.2, seed=3)[1].inputs, validation.inputs)
    assert not torch.equal(split_validation(_bundle(), 0.2, seed=4)[1].inputs, validation.inputs)
    bundle = _bundle()
    assert split_validation(bundle, 0.0, seed=3) == (bundle, None)        # nothing carved: the same bundle


def test_natural_clients_keep_their_remaining_examples_reindexed():
    bundle = _bundle(natural=True)
    train, validation = split_validation(bundle, 0.3, seed=1)
    held = set(validation.inputs.flatten().tolist())
    for original, reduced in zip(bundle.client_indices, train.client_indices):
        expected = [v for v in original.tolist() if v not in held]      # input value == original index
        assert train.train.inputs[reduced].flatten().tolist() == expected
