"""Deterministic cuDNN settings are scoped to the block and only for CUDA devices.

No GPU is needed: the settings are process flags, and a ``torch.device("cuda")`` object can be made
on any build."""
import pytest
import torch

from fedhet.engine.determinism import deterministic_kernels

cudnn = torch.backends.cudnn


@pytest.fixture
def autotuning_caller():
    """A caller that had turned autotuning on and determinism off; its settings are put back after."""
    saved = cudnn.deterministic, cudnn.benchmark
    cudnn.deterministic, cudnn.benchmark = False, True
    yield
    cudnn.deterministic, cudnn.benchmark = saved


def test_cuda_block_is_deterministic_and_restores_the_callers_settings(autotuning_caller):
    with deterministic_kernels(torch.device("cuda")):
        assert (cudnn.deterministic, cudnn.benchmark) == (True, False)
    assert (cudnn.deterministic, cudnn.benchmark) == (False, True)


def test_settings_are_restored_when_the_block_raises(autotuning_caller):
    with pytest.raises(RuntimeError, match="boom"):
        with deterministic_kernels(torch.device("cuda", 0)):
            raise RuntimeError("boom")
    assert (cudnn.deterministic, cudnn.benchmark) == (False, True)


def test_cpu_block_changes_nothing(autotuning_caller):
    with deterministic_kernels(torch.device("cpu")):
        assert (cudnn.deterministic, cudnn.benchmark) == (False, True)
