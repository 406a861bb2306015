"""Restoring a checkpoint puts each tensor where a fresh run keeps it."""
import torch

from fedhet.engine import checkpoint as ckpt


def test_restore_places_each_tensor_on_the_device_of_the_fresh_one():
    # A GPU run keeps the model on the GPU but participation draws on the CPU; the saved copies are
    # all on the CPU (checkpoints load with map_location="cpu"). "meta" stands in for the GPU.
    fresh = {"params": torch.empty(3, device="meta"), "participation": {"on": torch.zeros(4, dtype=torch.bool)}}
    saved = {"params": torch.ones(3), "participation": {"on": torch.ones(4, dtype=torch.bool)},
             "added_later": torch.ones(2)}
    restored = ckpt.restore(fresh, saved, "meta")
    assert restored["params"].device.type == "meta"
    assert restored["participation"]["on"].device.type == "cpu"
    assert restored["participation"]["on"].tolist() == [True] * 4
    # No fresh counterpart: the run's device.
    assert restored["added_later"].device.type == "meta"


def test_restore_keeps_values_and_non_tensors():
    saved = {"next_round": 7, "params": torch.arange(3.0), "log": [torch.tensor([1, 2]), "note"]}
    restored = ckpt.restore({"next_round": 0, "params": torch.zeros(3), "log": [torch.zeros(2), ""]}, saved, "cpu")
    assert restored["next_round"] == 7
    assert torch.equal(restored["params"], torch.arange(3.0))
    assert torch.equal(restored["log"][0], torch.tensor([1, 2])) and restored["log"][1] == "note"
