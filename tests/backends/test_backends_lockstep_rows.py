"""A lockstep batch's per-client bookkeeping (backends/lockstep.py) against the run-alone helpers
(backends/base.py's client_plan, client_batches and cohort_sizes): the same examples, step counts and
client sizes, exactly, across runs of two partitions, mixed local work and a cut-short plan."""
import dataclasses

import torch

import fedhet.components  # noqa: F401  (registers every component)
from fedhet.backends.base import RoundWork, client_batches, client_plan, cohort_sizes
from fedhet.backends.lockstep import LockstepRequest, _round_rows, train_lockstep
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import make_cohort_grad
from fedhet.client.schedule import batch_indices, batch_order, cut_short, plan_local_work
from fedhet.config import load_config
from fedhet.core.dataset import TensorDataset
from fedhet.core.seeding import torch_generator
from fedhet.engine import build_federation, simulator_from_config
from fedhet.testing import FEDERATION, UNIFORM

DIRICHLET = ("partition.name=dirichlet", "partition.alpha=0.1")


def _simulator(seed: int, *work: str):
    config = load_config(None, [*FEDERATION, *UNIFORM, *DIRICHLET, f"run.seed={seed}", *work])
    return simulator_from_config(config, build_federation(config, torch.device("cpu")))


def _work(simulator, clients: list[int], round_index: int = 2, step_limits=None) -> RoundWork:
    ids = torch.tensor(clients, dtype=torch.int64)
    return RoundWork(round_index=round_index, seed=simulator.seed, params=simulator.params, client_ids=ids,
                     client_states={name: store.read(ids) for name, store in simulator.client_stores.items()},
                     broadcast=simulator.broadcast, learning_rate=0.05, step_limits=step_limits)


def _requests():
    """Four runs: two partitions (other client offsets), other batch sizes, epochs and steps, and a
    client cut short by a step limit."""
    first, second = _simulator(1, "client.epochs=2", "client.batch_size=10"), _simulator(2)
    third, fourth = _simulator(1, "client.steps=5"), _simulator(1)
    assert not torch.equal(first.task.client_offsets, second.task.client_offsets)
    return [LockstepRequest(first.task, first.solver, _work(first, [0, 3, 7, 11])),
            LockstepRequest(second.task, second.solver, _work(second, [1, 3, 4])),
            LockstepRequest(third.task, third.solver, _work(third, [2, 5])),
            LockstepRequest(fourth.task, fourth.solver, _work(fourth, [0, 6, 9], step_limits={6: 1}))]


def _indexed(request: LockstepRequest, base: float) -> LockstepRequest:
    """The request on a copy of its task whose every training input is its own index (plus ``base``)."""
    train = request.task.train
    inputs = base + torch.arange(len(train.inputs), dtype=torch.float64).unsqueeze(1)
    return dataclasses.replace(request, task=dataclasses.replace(request.task, train=TensorDataset(inputs,
                                                                                                   train.targets)))


def test_batch_rows_read_the_examples_of_the_run_alone_batches():
    requests = [_indexed(r, 1e6 * i) for i, r in enumerate(_requests())]
    rows = _round_rows(requests)
    # Each row's examples, rows in step order, batch after batch (the layout's slot maps them).
    in_step_order = rows.batches.inputs[rows.batches.layout.slot].squeeze(1)
    expected, steps, sizes = [], [], []
    for i, request in enumerate(requests):
        task, work = request.task, request.work
        for client in work.client_ids.tolist():
            plan = client_plan(task, request.solver.options, work, client)
            expected.append(1e6 * i + torch.cat(client_batches(task, plan, work, client)).to(torch.float64))
            steps.append(plan.num_steps)
        sizes.append(cohort_sizes(task, work.client_ids))
    mine = in_step_order.split([len(expected[k]) for k in rows.order.tolist()])
    for position, k in enumerate(rows.order.tolist()):
        assert torch.equal(mine[position], expected[k]), k
    assert rows.num_steps.tolist() == steps
    assert steps[-2] == 1, "the step limit cut the client short"
    assert rows.client_sizes.dtype == torch.int64 and torch.equal(rows.client_sizes, torch.cat(sizes))


def test_batch_cohorts_count_the_examples_and_steps_of_the_run_alone():
    first, second = _requests()[0], _simulator(1)
    requests = [first, LockstepRequest(second.task, second.solver, _work(second, [1, 2, 8]))]
    results, _ = train_lockstep(requests, make_cohort_grad(requests[0].task))
    for request, (cohort, _) in zip(requests, results):
        alone, _ = SequentialBackend().train_cohort(request.task, request.solver, request.work)
        for name in ("client_ids", "num_examples", "local_steps"):
            mine, theirs = getattr(cohort, name), getattr(alone, name)
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name
        assert torch.allclose(cohort.deltas, alone.deltas, rtol=0, atol=1e-12)


def test_client_plan_from_a_given_count_is_the_plan_from_the_offsets():
    request = _requests()[3]
    task, work = request.task, request.work
    for client in work.client_ids.tolist():
        start, end = task.client_range(client)
        assert (client_plan(task, request.solver.options, work, client, num_examples=end - start)
                == client_plan(task, request.solver.options, work, client))


def test_batch_order_is_batch_indices_in_one_tensor():
    for epochs, steps, cut in ((1, 0, None), (3, 0, None), (2, 0, 3), (1, 7, None)):
        plan = plan_local_work(70, batch_size=16, epochs=epochs, steps=steps, system="fixed", seed=1,
                               round_index=0, client_id=0)
        if cut is not None:
            plan = cut_short(plan, cut)
        order, sizes = batch_order(70, plan, torch_generator(4, "b"))
        batches = batch_indices(70, plan, torch_generator(4, "b"))
        assert sizes == [len(batch) for batch in batches]
        assert torch.equal(order, torch.cat(batches)), (epochs, steps, cut)
