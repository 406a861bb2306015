"""User errors are one-line configuration errors, not "bug in fedhet" (exit 3), and an override
cannot smuggle in more than its value (campaign 2026-11-24 findings M5 and M6)."""
from __future__ import annotations

import pytest

from fedhet.config.schema import load_config, parse_override
from fedhet.core.options import ConfigError
from fedhet.engine.runner import resolve_device
from fedhet.error_lines import error_line


@pytest.mark.parametrize("name", ["cuda:99", "mps"])
def test_a_device_this_machine_lacks_is_a_config_error(name):
    import torch

    if name == "mps" and hasattr(torch.backends, "mps") and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(ConfigError, match=r"run\.device") as caught:
        resolve_device(name)
    assert error_line(caught.value)[1] == 2


def test_cuda_without_a_gpu_is_a_config_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="no CUDA GPU is available"):
        resolve_device("cuda")


def test_wandb_refusing_to_start_is_a_user_error(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    from fedhet.tracking.base import TrackingContext
    from fedhet.tracking.wandb import WandbSetupError, WandbTracker

    def refuse(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty). call wandb.login(key=[your_api_key])")

    monkeypatch.setattr(wandb, "init", refuse)
    config = load_config(None, ['run.wandb_mode="online"'])
    context = TrackingContext(run_dir=tmp_path, run_name="a", project="p", sweep=None, config={},
                              options=config.run, config_toml="")
    with pytest.raises(WandbSetupError, match="wandb_mode = 'online': W&B refused to start: api_key") as caught:
        WandbTracker().start(context, None)
    assert error_line(caught.value)[1] == 2


def test_a_shard_partitioner_with_too_many_shards_is_one_line():
    pytest.importorskip("flwr_datasets.partitioner")
    import numpy as np

    from fedhet.data.flower_partition import flower_partition
    from fedhet.errors import FedhetError

    config = load_config(None, ["partition.name=flwr", "partition.partitioner=ShardPartitioner",
                                "partition.num_clients=4", "partition.args={num_shards_per_partition = 1000000}"])
    labels = np.arange(40) % 10
    with pytest.raises(FedhetError) as caught:
        flower_partition(config.partition.options, labels, seed=0)
    assert not isinstance(caught.value, ZeroDivisionError) and error_line(caught.value)[1] == 2


def test_an_override_with_a_newline_cannot_add_tables():
    with pytest.raises(ConfigError, match="one value per override"):
        parse_override("run.rounds=7\n[data]\nalpha=99")
    assert parse_override("run.rounds=7")[1].parsed == 7


@pytest.mark.parametrize("model", ["pfl_cnn", "cnn5", "fedau_cnn"])
def test_an_image_model_on_tabular_data_is_a_one_line_user_error(model):
    from fedhet.models import build_model

    with pytest.raises(ValueError, match=rf"model '{model}': input_shape = \(60,\); expected an image") as caught:
        build_model(model, (60,), 10)
    line, status = error_line(caught.value)
    assert status == 2 and line.startswith(f"fedhet: model '{model}'") and "bug" not in line
