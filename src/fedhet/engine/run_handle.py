"""A live configured run: the :class:`~fedhet.engine.simulator.Simulator` of a config, plus what
``fedhet run`` adds to its rounds: evaluation on the test set (and the validation split, the clients'
training data, each client's data when asked), the records, elapsed time and the checkpoint.

The round loop and files around it are :mod:`fedhet.engine.runner`'s; this module runs one round
and evaluates it.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from fedhet.algorithms import build as build_algorithm
from fedhet.backends.ray_backend import RayBackend, RayWorkersLostError
from fedhet.config.schema import ExperimentConfig
from fedhet.core.io import atomic_write_json
from fedhet.core.task import evaluate
from fedhet.engine import checkpoint as ckpt, client_eval
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.async_loop import AsyncSimulator
from fedhet.engine.backend_choice import BackendOptions, select_backend
from fedhet.engine.clock import clock_summary
from fedhet.engine.federation import Federation
from fedhet.engine.fingerprint import config_fingerprint
from fedhet.engine.rundir import STORES_DIR
from fedhet.engine.simulator import TrainingDivergedError

if TYPE_CHECKING:
    from fedhet.engine.lockstep import LockstepGroup

DIVERGED_FILE = "diverged.json"   # written when a round diverged: {"round": t, "reason": ...}
from fedhet.engine.summary import summarize

logger = logging.getLogger(__name__)


def resume_command(run_dir: str | Path) -> str:
    """The command that resumes ``run_dir``, safe to paste into a shell: a run name may hold ``$(...)``
    or spaces (both valid directory names), so the path is quoted (docs/reliability.md, "Security")."""
    return f"fedhet run --resume {shlex.quote(str(run_dir))}"


class RunHandle:
    """A live configured run: the :class:`Simulator` plus evaluation, records and files."""

    def __init__(self, config: ExperimentConfig, run_dir: Path, federation: Federation,
                 log: Callable[[str], None], lockstep: Optional[LockstepGroup] = None):
        self.config = config
        self.run_dir = run_dir
        self.federation = federation
        self.task = federation.task
        self.log = log
        run = config.run
        # The solver is built once: backend choice reads it (can its rule be vectorised?) and the
        # simulator trains it.
        algorithm = build_algorithm(config)
        if lockstep is None:
            backend, backend_note = select_backend(run.backend, self.task, algorithm.solver,
                                                   BackendOptions.from_config(config))
        else:
            # A lockstep run trains in the group's batches (fedhet.engine.lockstep); alone, where it
            # cannot join, it trains in this process: sequential on a CPU, vectorised on a GPU.
            alone, _ = select_backend("sequential" if self.task.device.type == "cpu" else "vectorized",
                                      self.task, algorithm.solver, BackendOptions.from_config(config))
            backend = lockstep.member(alone, log)
            backend_note = f"a lockstep group's batches; a run that cannot join trains on the {alone.name} backend"
        log(f"backend: {backend.name} ({backend_note})")
        self.simulator = simulator_from_config(config, federation, algorithm=algorithm, backend=backend,
                                               stores_dir=run_dir / STORES_DIR)
        self.backend = backend
        # A lockstep run evaluates its validation split and training data with the group too
        # (batched with the other runs'); any other backend's own evaluate serves the test set only.
        self.eval_backend = backend if lockstep is not None else None
        if isinstance(backend, RayBackend):
            backend.set_lost_hint(self.intact_hint())
        self.records: list[dict[str, Any]] = []
        self.elapsed = 0.0
        self.pending_losses: list[float] = []
        # The validation split is evaluated like the test set, in this process (the multi-process
        # backend's workers hold the test set only).
        self.validation_task = (dataclasses.replace(self.task, test=federation.validation)
                                if federation.validation is not None else None)
        self.client_eval_set = self._client_eval_set() if run.client_eval_every > 0 else None
        # The clients' training data as an evaluation set (run.global_train_loss_every); no copy.
        self.global_train_task = dataclasses.replace(self.task, test=self.task.train)

    def _client_eval_set(self) -> client_eval.ClientEvalSet:
        if self.config.run.client_eval_data == "train":
            return client_eval.train_eval_set(self.task)
        train = self.federation.bundle.train
        # config.client_eval refuses client_eval_data = "holdout" without data.client_test_fraction > 0.
        assert self.federation.held_out is not None, "run.client_eval_data = 'holdout' needs a held-out slice"
        return client_eval.holdout_eval_set(train.inputs, train.targets, self.federation.held_out, self.task)

    @property
    def next_round(self) -> int:
        return self.simulator.next_round

    @property
    def participation_log(self) -> torch.Tensor:
        return self.simulator.participation_log

    def state_dict(self) -> dict[str, Any]:
        return {"simulator": self.simulator.state_dict(), "elapsed": self.elapsed,
                "pending_losses": self.pending_losses}

    def save_checkpoint(self) -> None:
        for store in self.simulator.client_stores.values():
            store.flush()
        ckpt.save_checkpoint(self.run_dir, {**self.state_dict(), "config_fingerprint": config_fingerprint(self.config)})

    def load_state(self, saved: dict[str, Any]) -> None:
        self.simulator.load_state(saved["simulator"])
        self.elapsed = saved["elapsed"]
        self.pending_losses = list(saved["pending_losses"])

    def intact_hint(self) -> str:
        return f"The last checkpoint in {self.run_dir} is intact; continue with `{resume_command(self.run_dir)}`."

    def run_round(self) -> dict[str, Any]:
        config = self.config
        started = time.perf_counter()
        try:
            record, cohort = self.simulator.run_round()
        except TrainingDivergedError as error:
            # A record of how the run ended, for readers that count a diverged run with a failure value
            # (fedhet.lab.claims.evaluate) instead of mistaking it for one killed or still running.
            atomic_write_json(self.run_dir / DIVERGED_FILE, {"round": self.simulator.next_round + 1, "reason": str(error)})
            raise TrainingDivergedError(f"{error}. The last checkpoint in {self.run_dir} is intact.") from None
        except RayWorkersLostError as error:
            raise RayWorkersLostError(f"{error}. {self.intact_hint()}") from None
        if len(cohort):
            self.pending_losses.append(float(cohort.train_loss.mean()))
        round_number = record["round"]
        client_round = client_eval.is_client_eval_round(round_number, config.run.client_eval_every, config.run.rounds)
        train_loss_round = client_eval.is_client_eval_round(round_number, config.run.global_train_loss_every,
                                                            config.run.rounds)
        if (round_number % config.run.eval_every == 0 or round_number == config.run.rounds or client_round
                or train_loss_round):
            try:
                test_loss, test_accuracy = evaluate(self.task, self.simulator.params,
                                                    batch_size=config.run.eval_batch_size, backend=self.backend)
            except RayWorkersLostError as error:
                raise RayWorkersLostError(f"{error}. {self.intact_hint()}") from None
            record["test_loss"], record["test_accuracy"] = test_loss, test_accuracy
            if self.validation_task is not None:
                record["val_loss"], record["val_accuracy"] = evaluate(
                    self.validation_task, self.simulator.params, batch_size=config.run.eval_batch_size,
                    backend=self.eval_backend)
            # train_loss: mean local minibatch loss over the rounds since the previous evaluation.
            record["train_loss"] = (sum(self.pending_losses) / len(self.pending_losses)
                                    if self.pending_losses else math.nan)
            self.pending_losses = []
            if train_loss_round:
                # The global model over every client's training data (not the local minibatch losses):
                # FedAU's criterion, "the training loss" of the global model (its Appendix C.4).
                record["global_train_loss"], record["global_train_accuracy"] = evaluate(
                    self.global_train_task, self.simulator.params, batch_size=config.run.eval_batch_size,
                    backend=self.eval_backend)
            if client_round:
                record.update(self.evaluate_clients(round_number))
        self.elapsed += time.perf_counter() - started
        record["wall_seconds"] = self.elapsed
        return record

    def evaluate_clients(self, round_number: int) -> dict[str, float]:
        """Per-client accuracies of the current model: their statistics for the record; the
        accuracies themselves go to ``client_accuracy.json`` (the latest evaluated round)."""
        eval_set = self.client_eval_set
        if eval_set is None:
            raise RuntimeError("per-client evaluation needs run.client_eval_every > 0")
        started = time.perf_counter()
        accuracies = client_eval.client_accuracies(self.task, self.simulator.params, eval_set,
                                                   batch_size=self.config.run.eval_batch_size)
        logger.debug("round %d: per-client evaluation of %d clients (%d examples) took %.3f s", round_number,
                     eval_set.num_clients, int(eval_set.counts.sum()), time.perf_counter() - started)
        atomic_write_json(self.run_dir / "client_accuracy.json",
                          {"round": round_number, "data": eval_set.source,
                           "num_examples": eval_set.counts.tolist(),
                           "accuracy": [a if math.isfinite(a) else None for a in accuracies.tolist()]})
        return client_eval.client_accuracy_statistics(accuracies)

    def summary(self) -> dict[str, Any]:
        sim = self.simulator
        summary = summarize(self.records, total_rounds=self.config.run.rounds, rounds_done=sim.next_round,
                            wall_seconds=self.elapsed, e_lud_sum=sim.e_lud_sum, e_lud_count=sim.e_lud_count,
                            target_accuracy=self.config.run.target_accuracy)
        if sim.clock is not None and sim.clock_state is not None:
            summary.update(clock_summary(sim.clock_state, self.records, self.config.run.target_accuracy))
        if isinstance(sim, AsyncSimulator):
            summary.update(sim.async_summary())
        return summary
