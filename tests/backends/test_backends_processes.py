"""The multi-process backend gives bitwise the sequential backend's numbers (float64 and float32),
for every registered local solver, and its split evaluation gives bitwise the engine's."""
import os
import time

import pytest
import torch

import fedhet.backends.processes as processes_module
from backend_cases import SOLVERS, assert_same_round, make_solver, make_task, make_work
from fedhet.backends.processes import ProcessPoolBackend, claim_order, fork_available
from fedhet.backends.sequential import SequentialBackend
from fedhet.core.task import evaluate

pytestmark = [pytest.mark.skipif(not fork_available(), reason="needs the fork start method"),
              pytest.mark.usefixtures("one_thread")]
COHORT = [0, 1, 3, 4, 6, 8, 9]


@pytest.fixture
def pool():
    backend = ProcessPoolBackend(2)
    yield backend
    backend.close()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("system", ["fixed", "hybrid_plus"])
@pytest.mark.parametrize("solver_name", SOLVERS)
def test_processes_bitwise_equal_to_sequential(solver_name, system, dtype, pool):
    task, config = make_task("model.name=mlp", "model.hidden=[12]", "client.batch_size=16",
                             f"client.system={system}", dtype=dtype)
    solver = make_solver(solver_name, config)
    for round_index in (0, 1):                       # the pool persists across rounds
        work = make_work(task, solver, COHORT, round_index=round_index)
        assert_same_round(SequentialBackend().train_cohort(task, solver, work),
                          pool.train_cohort(task, solver, work), exact=True)


def test_a_multi_threaded_caller_gets_the_one_thread_numbers(pool):
    # run.threads = 2 gives the parent two torch threads; its share of the clients (whichever it
    # claims) runs with one, as the workers do, so the numbers are those of one thread, every round.
    task, config = make_task("model.name=mlp", "model.hidden=[64]", "client.batch_size=16", dtype="float32")
    solver = make_solver("sgd", config)
    work = make_work(task, solver, COHORT)
    reference = SequentialBackend().train_cohort(task, solver, work)
    x = work.params + 0.05
    one_thread_eval = evaluate(task, x, batch_size=7)
    torch.set_num_threads(2)
    # the case is meaningful: two threads round this MLP's float32 sums differently
    assert not torch.equal(SequentialBackend().train_cohort(task, solver, work)[0].deltas, reference[0].deltas)
    for _ in range(3):
        assert_same_round(reference, pool.train_cohort(task, solver, work), exact=True)
        assert evaluate(task, x, batch_size=7, backend=pool) == one_thread_eval
        assert torch.get_num_threads() == 2                  # the caller's count is restored


def test_workers_persist_across_rounds_and_close_ends_them(pool):
    task, config = make_task("model.name=logreg", "client.batch_size=16")
    solver = make_solver("sgd", config)
    pool.train_cohort(task, solver, make_work(task, solver, COHORT, round_index=0))
    processes = list(pool._pool.processes)
    pids = [p.pid for p in processes]
    pool.train_cohort(task, solver, make_work(task, solver, COHORT, round_index=1))
    assert [p.pid for p in pool._pool.processes] == pids
    # a bigger cohort than the arena holds: re-forked with doubled capacity, same numbers
    work = make_work(task, solver, list(range(10)))
    assert_same_round(SequentialBackend().train_cohort(task, solver, work), pool.train_cohort(task, solver, work),
                      exact=True)
    pool.close()
    assert all(not p.is_alive() for p in processes)


def test_split_evaluation_is_bitwise_the_engine_evaluation(pool):
    task, config = make_task("model.name=mlp", "model.hidden=[12]", dtype="float32")
    solver = make_solver("sgd", config)
    x = make_work(task, solver, COHORT).params + 0.05
    before = evaluate(task, x, batch_size=7, backend=pool)         # no pool yet: evaluated here
    pool.train_cohort(task, solver, make_work(task, solver, COHORT))
    for batch_size in (7, 50, 10_000):
        assert evaluate(task, x, batch_size=batch_size, backend=pool) == evaluate(task, x, batch_size=batch_size)
    assert before == evaluate(task, x, batch_size=7)


def test_worker_failure_is_reported_with_its_traceback(pool):
    task, config = make_task("model.name=logreg")
    parent = os.getpid()

    class BrokenInWorkers(type(make_solver("sgd", config))):
        def step(self, *args, **kwargs):
            if os.getpid() != parent:
                raise ValueError("deliberate failure in a worker")
            time.sleep(0.01)          # a slow parent: the worker surely claims a client
            return super().step(*args, **kwargs)

    solver = BrokenInWorkers(config.client.options)
    with pytest.raises(RuntimeError, match="(?s)worker 0 failed.*deliberate failure in a worker"):
        pool.train_cohort(task, solver, make_work(task, solver, COHORT))


def test_failure_in_the_parents_share_propagates_and_the_next_round_reforks(pool):
    task, config = make_task("model.name=logreg")
    parent = os.getpid()
    sgd = type(make_solver("sgd", config))

    class BrokenInParent(sgd):
        fail = True

        def step(self, *args, **kwargs):
            if os.getpid() == parent and self.fail:
                raise ValueError("deliberate failure in the parent")
            return super().step(*args, **kwargs)

    solver = BrokenInParent(config.client.options)
    work = make_work(task, solver, COHORT)
    with pytest.raises(ValueError, match="deliberate failure in the parent"):
        pool.train_cohort(task, solver, work)
    assert pool._pool is None                       # the half-answered pool was shut down
    BrokenInParent.fail = False
    assert_same_round(SequentialBackend().train_cohort(task, solver, work), pool.train_cohort(task, solver, work),
                      exact=True)


@pytest.mark.parametrize("processes", [1, 3])
def test_any_process_count_gives_the_sequential_numbers(processes):
    task, config = make_task("model.name=mlp", "model.hidden=[12]", "client.system=hybrid_plus")
    solver = make_solver("sgd", config)
    backend = ProcessPoolBackend(processes)
    try:
        work = make_work(task, solver, COHORT)
        assert_same_round(SequentialBackend().train_cohort(task, solver, work), backend.train_cohort(task, solver, work),
                          exact=True)
        assert len(backend._pool.processes) == processes - 1
        x = work.params + 0.05
        assert evaluate(task, x, batch_size=7, backend=backend) == evaluate(task, x, batch_size=7)
    finally:
        backend.close()


def test_claim_order_is_longest_processing_time_first():
    assert claim_order([1, 5, 1, 3, 5]) == [1, 4, 3, 0, 2]
    assert claim_order([]) == []


def test_a_slow_process_claims_fewer_clients_and_the_numbers_do_not_change(pool, monkeypatch):
    task, config = make_task("model.name=logreg", "client.batch_size=16")
    parent = os.getpid()

    class SlowParent(type(make_solver("sgd", config))):
        def step(self, *args, **kwargs):
            if os.getpid() == parent:
                time.sleep(0.01)
            return super().step(*args, **kwargs)

    solver = SlowParent(config.client.options)
    work = make_work(task, solver, COHORT)
    claimed = {}
    original = processes_module.train_claimed

    def recording(*args):
        result = original(*args)
        claimed["parent"] = result[0]
        return result

    monkeypatch.setattr(processes_module, "train_claimed", recording)
    result = pool.train_cohort(task, solver, work)
    assert 0 < len(claimed["parent"]) < len(COHORT) // 2      # the worker took the larger part
    assert_same_round(SequentialBackend().train_cohort(task, solver, work), result, exact=True)


def test_refuses_tasks_off_the_cpu(pool):
    task, config = make_task("model.name=logreg")
    task.device = torch.device("meta")
    solver = make_solver("sgd", config)
    with pytest.raises(RuntimeError, match="runs on the CPU"):
        pool.train_cohort(task, solver, make_work(task, solver, COHORT))


def test_usable_cpus_respects_affinity_and_threads():
    from fedhet.core.machine import usable_cpus
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert usable_cpus() == allowed
    assert usable_cpus(1) == 1
    assert usable_cpus(10_000) == allowed
