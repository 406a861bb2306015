import math

import torch

from fedhet.client.base import clip_by_norm
from fedhet.client.schedule import batch_indices, plan_local_work
from fedhet.core.seeding import torch_generator


def test_epoch_plan_visits_each_example_once_per_epoch():
    plan = plan_local_work(70, batch_size=32, epochs=3, steps=0, system="fixed", seed=1, round_index=0, client_id=0)
    assert plan.num_steps == 3 * math.ceil(70 / 32)
    batches = batch_indices(70, plan, torch_generator(1, "b"))
    assert len(batches) == plan.num_steps
    for epoch in range(3):
        epoch_indices = torch.cat(batches[epoch * 3:(epoch + 1) * 3])
        assert sorted(epoch_indices.tolist()) == list(range(70))


def test_step_plan_has_fixed_full_batches():
    plan = plan_local_work(10, batch_size=4, epochs=1, steps=7, system="fixed", seed=1, round_index=0, client_id=0)
    batches = batch_indices(10, plan, torch_generator(1, "b"))
    assert len(batches) == 7 and all(len(b) == 4 for b in batches)
    # Examples are used as evenly as possible: 28 draws over 10 examples -> each 2 or 3 times.
    counts = torch.bincount(torch.cat(batches), minlength=10)
    assert counts.min() >= 2 and counts.max() <= 3


def test_hybrid_plus_draws_stay_in_range_and_vary():
    plans = [plan_local_work(50, batch_size=64, epochs=1, steps=0, system="hybrid_plus", seed=3,
                             round_index=r, client_id=c) for r in range(20) for c in range(5)]
    assert all(2 <= p.epochs <= 5 and 10 <= p.batch_size <= 50 for p in plans)
    assert len({p.epochs for p in plans}) > 1 and len({p.batch_size for p in plans}) > 5
    assert all(p.num_steps == p.epochs * math.ceil(50 / p.batch_size) for p in plans)
    again = plan_local_work(50, batch_size=64, epochs=1, steps=0, system="hybrid_plus", seed=3, round_index=4,
                            client_id=2)
    assert again == plans[4 * 5 + 2]


def test_clip_by_norm_matches_torch_clip_grad_norm():
    grad = torch.randn(10) * 5
    param = torch.nn.Parameter(torch.zeros(10))
    param.grad = grad.clone()
    torch.nn.utils.clip_grad_norm_([param], 1.0)
    assert torch.allclose(clip_by_norm(grad, 1.0), param.grad)
    rows = torch.stack([grad, grad / 100])
    clipped = clip_by_norm(rows, 1.0)
    assert torch.allclose(clipped[1], grad / 100)  # below the threshold: unchanged
