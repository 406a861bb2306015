"""Flower messages carry fedhet's tensors losslessly (the basis of bitwise equivalence)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("flwr")

from fedhet.flower.messages import (  # noqa: E402
    TrainRequest,
    Upload,
    hosted_content,
    hosted_from_content,
    record_tensors,
    tensors_record,
)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_tensors_round_trip_bitwise(dtype):
    generator = torch.Generator().manual_seed(0)
    tensor = (torch.randn(3, 5, generator=generator, dtype=torch.float64) * 1e3).to(dtype)
    back = record_tensors(tensors_record({"t": tensor}))["t"]
    assert back.dtype == dtype and back.shape == tensor.shape
    assert torch.equal(back.view(-1).view(torch.uint8) if dtype == torch.bfloat16 else back,
                       tensor.view(-1).view(torch.uint8) if dtype == torch.bfloat16 else tensor)


def test_train_request_and_upload_round_trip():
    x = torch.randn(7, dtype=torch.float64)
    request = TrainRequest(round_index=4, client_ids=[1, 5], params=x, broadcast={"control_variate": x * 2},
                           learning_rate=0.0123456789, fingerprint="abc")
    back = TrainRequest.from_content(request.to_content(), "cpu")
    assert back.round_index == 4 and back.client_ids == [1, 5] and back.fingerprint == "abc"
    assert back.learning_rate == 0.0123456789
    assert torch.equal(back.params, x) and torch.equal(back.broadcast["control_variate"], x * 2)
    upload = Upload(client_ids=torch.tensor([1, 5]), deltas=torch.randn(2, 7, dtype=torch.float64),
                    num_examples=torch.tensor([30, 40]), local_steps=torch.tensor([2, 2]),
                    train_loss=torch.tensor([0.5, 0.25], dtype=torch.float64),
                    extras={"control_variate_change": torch.randn(2, 7, dtype=torch.float64)})
    got = Upload.from_content(upload.to_content())
    for name in ("client_ids", "deltas", "num_examples", "local_steps", "train_loss"):
        assert torch.equal(getattr(got, name), getattr(upload, name)), name
    assert torch.equal(got.extras["control_variate_change"], upload.extras["control_variate_change"])


def test_hosted_reply_round_trip():
    assert hosted_from_content(hosted_content([0, 2, 4], 6, "f")) == ([0, 2, 4], 6, "f")
