"""Every claims run's local work and evaluations over all its rounds, drawn without training (the
cost model of ``benchmarks/claims_cost.py``; benchmarks/README.md, "The cost model").

A run's work is fixed by its configuration and seed before any training: the federation (dataset,
validation split, partition: :func:`fedhet.engine.federation.build_federation`), the participation
process of ``[participation]`` (:func:`fedhet.engine.assembly.participation_from_config`, sampled
round by round from its own seeded state as :class:`fedhet.engine.simulator.Simulator` samples it),
each participant's local plan (:func:`fedhet.client.schedule.plan_local_work` with the client's size,
as every backend calls it through ``fedhet.backends.base.client_plan``) and the evaluation schedule of
:class:`fedhet.engine.run_handle.RunHandle` (every ``run.eval_every`` rounds, the last round, the
``run.global_train_loss_every`` and ``run.client_eval_every`` rounds; each evaluation passes the test
set and, where there is one, the validation split in passes of :func:`fedhet.core.task.eval_pass_size`).

A :class:`Work` keeps histograms, not lists: ``train[rows]`` is how many forward-and-backward passes
of ``rows`` examples the run makes (a step's batch, the partial last batch of an epoch counted with
its own rows, each step counted once per gradient the solver takes), ``evaluate[rows]`` how many
forward passes of ``rows`` examples it evaluates. Runs that differ only in their method share the
same draws, so :func:`draw_work` is cached on what the draws depend on.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Optional

from flop_count import Linear, forward_flops, gradient_flops, gradients_per_step, linear_layers


@dataclasses.dataclass
class Work:
    """One run's counted work (module docstring)."""

    layers: list[Linear]
    train: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    evaluate: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rounds: int = 0
    participations: int = 0          # client-rounds
    steps: int = 0                   # local steps (before the solver's gradients per step)
    evaluations: int = 0
    gradients: int = 1               # forward-and-backward passes a step (counted in ``train``)

    def train_flops(self) -> int:
        return sum(count * gradient_flops(self.layers, rows) for rows, count in self.train.items())

    def eval_flops(self) -> int:
        return sum(count * forward_flops(self.layers, rows) for rows, count in self.evaluate.items())

    def three_forwards_flops(self) -> int:
        """The training FLOPs by the rule this cost model replaces: 3x the forward of every example,
        one gradient a step (for the comparison in benchmarks/README.md)."""
        rows = sum(rows * count for rows, count in self.train.items()) // self.gradients
        return 3 * forward_flops(self.layers, rows)

    def scaled(self, gradients: int) -> "Work":
        """The same draws for a solver taking ``gradients`` forward-and-backward passes a step."""
        train = collections.Counter({rows: count * gradients for rows, count in self.train.items()})
        return dataclasses.replace(self, train=train, evaluate=collections.Counter(self.evaluate),
                                   gradients=gradients)


def step_rows(num_examples: int, batch_size: int, epochs: int, num_steps: int) -> list[int]:
    """Rows of each local step of a plan (:class:`fedhet.client.schedule.LocalPlan`): in epoch mode a pass
    over the ``num_examples`` examples in batches of ``batch_size``, the last one partial, ``epochs``
    times; in step mode ``num_steps`` full batches (``fedhet.client.schedule.batch_indices``)."""
    if epochs > 0:
        full, rest = divmod(num_examples, batch_size)
        one_epoch = [batch_size] * full + ([rest] if rest else [])
        rows = one_epoch * epochs
        assert len(rows) == num_steps, (len(rows), num_steps)
        return rows
    return [batch_size] * num_steps


def eval_rows(num_examples: int, pass_size: int) -> list[int]:
    """Rows of each forward pass of one evaluation (``fedhet.core.task.eval_passes``)."""
    full, rest = divmod(num_examples, pass_size)
    return [pass_size] * full + ([rest] if rest else [])


def _plan_key(config: Any) -> tuple:
    """What a run's draws depend on: everything but its method (the server, the solver's own options)."""
    client = config.client.options
    return (repr(config.data), repr(config.partition), repr(config.participation), repr(config.model),
            config.run.seed, config.run.rounds, config.run.eval_every, config.run.global_train_loss_every,
            config.run.client_eval_every, config.run.client_eval_data, config.run.eval_batch_size,
            client.batch_size, client.epochs, client.steps, client.system)


class Planner:
    """Draws :class:`Work` for claims runs, caching the draws shared by runs of different methods and
    the loaded dataset (:class:`fedhet.engine.dataset_cache.DatasetCache`)."""

    def __init__(self) -> None:
        from fedhet.engine.dataset_cache import DatasetCache

        self.datasets = DatasetCache()
        self.cache: dict[tuple, Work] = {}
        self.federations: dict[tuple, Any] = {}

    def work(self, config: Any) -> Work:
        """The run's work, its solver's gradients per step applied."""
        key = _plan_key(config)
        if key not in self.cache:
            self.cache[key] = draw_work(config, self.federation(config))
        return self.cache[key].scaled(gradients_per_step(config.client.name))

    def federation(self, config: Any) -> Any:
        """The run's federation; runs of the same data, partition, model and seed share it (FedAU's
        three participation patterns)."""
        import torch

        from fedhet.engine.federation import build_federation

        key = (repr(config.data), repr(config.partition), repr(config.model), config.run.seed, config.run.dtype)
        if key not in self.federations:
            self.federations = {key: build_federation(config, torch.device("cpu"), datasets=self.datasets)}
        return self.federations[key]


def draw_work(config: Any, federation: Any, rounds: Optional[int] = None) -> Work:
    """One run's :class:`Work` with one gradient per step (module docstring), on its ``federation``
    (:func:`fedhet.engine.federation.build_federation` of ``config``). ``rounds``: only the first
    rounds (a test's short draw; their evaluations as the configuration schedules them)."""
    from fedhet.client.schedule import plan_local_work
    from fedhet.core.task import eval_pass_size
    from fedhet.engine.assembly import participation_from_config
    from fedhet.engine.client_eval import is_client_eval_round
    from fedhet.participation.base import ParticipationContext

    if config.system is not None or config.asynchronous is not None:
        raise ValueError(f"{config.run.name}: the cost model draws synchronous rounds without a virtual clock; "
                         "a [system] or [asynchronous] section is not supported")
    run = config.run
    task = federation.task
    work = Work(layers=linear_layers(task.model))
    sizes = task.client_sizes.tolist()
    client = config.client.options
    process = participation_from_config(config)
    context = ParticipationContext(num_clients=task.num_clients, seed=run.seed,
                                   client_label_counts=federation.label_counts)
    state = process.init(context)
    pass_size = eval_pass_size(task, task.spec.flatten(task.model), run.eval_batch_size)
    per_evaluation = eval_rows(len(task.test), pass_size)
    if federation.validation is not None:
        per_evaluation += eval_rows(len(federation.validation), pass_size)
    train_pass = eval_rows(len(task.train), pass_size)
    client_pass: list[int] = []
    if run.client_eval_every > 0:
        if run.client_eval_data == "train":
            client_pass = [rows for n in sizes for rows in eval_rows(n, pass_size)]
        else:
            held = federation.held_out or []
            client_pass = [rows for idx in held for rows in eval_rows(len(idx), pass_size)]
    total = run.rounds if rounds is None else min(rounds, run.rounds)
    for t in range(total):
        ids, state = process.sample(state, t, context)
        for client_id in ids.tolist():
            plan = plan_local_work(sizes[client_id], batch_size=client.batch_size, epochs=client.epochs,
                                   steps=client.steps, system=client.system, seed=run.seed, round_index=t,
                                   client_id=client_id)
            for rows in step_rows(sizes[client_id], plan.batch_size, plan.epochs, plan.num_steps):
                work.train[rows] += 1
            work.steps += plan.num_steps
            work.participations += 1
        r = t + 1
        client_round = is_client_eval_round(r, run.client_eval_every, run.rounds)
        train_round = is_client_eval_round(r, run.global_train_loss_every, run.rounds)
        if r % run.eval_every == 0 or r == run.rounds or client_round or train_round:
            work.evaluations += 1
            for rows in per_evaluation + (train_pass if train_round else []) + (client_pass if client_round else []):
                work.evaluate[rows] += 1
    work.rounds = total
    return work
