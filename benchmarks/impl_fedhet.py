"""fedhet on workload W through its public API (``run_experiment``), with a chosen backend.

Usage: python impl_fedhet.py mlp|cnn BACKEND [rounds] [cpu|cuda]. The wall time runs from the runner's
``on_run_start`` (data loaded, model built, workers not yet started) to the end of the last
round (its evaluation and the final checkpoint; checkpoints are written at the end only, the floor
writes none). The plots and summary written after the last round are not counted. Prints the backend the runner announced,
the first round's seconds (it starts the workers: forked processes or Ray actors) and the mean
seconds of the later rounds. With ``ray``, starting the local Ray itself happens when the backend
is selected, before the stopwatch starts; it is reported as ``setup_seconds`` (from the call to ``run_experiment`` to the stopwatch's
start: loading the data, building the model, selecting the backend).
"""
import sys
import tempfile
import time

import workload as W
from fedhet.config.schema import load_config
from fedhet.engine.callbacks import Callback
from fedhet.engine.runner import run_experiment


class Stopwatch(Callback):
    """From the start of the run to the end of the last round's callbacks (its evaluation and
    checkpoint); the end-of-run plots and summary files come after and are not counted."""

    def on_run_start(self, run):
        self.startup, self.startup_cpu = W.startup_seconds(), W.startup_cpu_seconds()
        self.started = time.perf_counter()
        self.round_ends = []

    def setup_seconds(self, since: float) -> float:
        """Seconds from ``since`` to the stopwatch's start (loading, building, selecting the backend:
        for ``ray``, starting the local Ray)."""
        return self.started - since

    def on_round_end(self, run, record):
        self.wall = time.perf_counter() - self.started
        self.round_ends.append(self.wall)
        return False


def main(model_name: str, backend: str, rounds: int, device: str = "cpu") -> None:
    notes = []
    with tempfile.TemporaryDirectory(prefix="fedhet-bench-") as out:
        config = load_config(None, [
            "data.name=fmnist", f"data.root={W.data_dir()}", "partition.name=iid",
            f"partition.num_clients={W.NUM_CLIENTS}", f"model.name={model_name}",
            "participation.name=uniform", f"participation.clients_per_round={W.CLIENTS_PER_ROUND}",
            "client.name=sgd", f"client.learning_rate={W.LEARNING_RATE}", f"client.batch_size={W.BATCH_SIZE}",
            f"client.epochs={W.LOCAL_EPOCHS}", "server.name=fedavg", "server.learning_rate=1.0",
            f"run.rounds={rounds}", "run.eval_every=1", f"run.eval_batch_size={W.EVAL_BATCH}",
            f"run.checkpoint_every={rounds}", f"run.backend={backend}", f"run.device={device}",
            "run.progress=false", f"run.seed={W.SEED}", f"run.out_dir={out}", "run.name=w"])
        stopwatch = Stopwatch()
        started = time.perf_counter()
        summary = run_experiment(config, callbacks=[stopwatch], log=notes.append)
    ends = stopwatch.round_ends
    W.emit({"wall_seconds": stopwatch.wall, "rounds": rounds,
            # Round 1 includes starting the workers (forked processes, Ray actors); the rest is the
            # steady state.
            "first_round_seconds": ends[0], "later_round_seconds": (ends[-1] - ends[0]) / max(len(ends) - 1, 1),
            "setup_seconds": stopwatch.setup_seconds(started), "final_accuracy": summary["final_accuracy"],
            "final_loss": summary.get("final_loss"), "backend": summary.get("backend"),
            "notes": [n for n in notes if n.startswith("backend")], "startup_seconds": stopwatch.startup,
            "startup_cpu_seconds": stopwatch.startup_cpu})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else W.ROUNDS,
         sys.argv[4] if len(sys.argv) > 4 else "cpu")
