"""A small, fast federation (FedProx Synthetic(1,1) data, logistic regression, 12 clients) and a
callback that interrupts a run, shared by the tests; :func:`small_toml` writes it as an experiment file."""
from fedhet.engine.callbacks import Callback

SMALL = [
    "data.name=synthetic", "data.num_devices=12", "data.max_device_size=120",
    "partition.name=natural", "partition.num_clients=12",
    "model.name=logreg", "participation.name=uniform", "participation.clients_per_round=4",
    "client.learning_rate=0.05", "client.batch_size=16", "client.epochs=1",
    "run.rounds=6", "run.eval_every=1", "run.checkpoint_every=2", "run.progress=false",
]

_FEDERATION_TOML = """
[data]
name = "synthetic"
num_devices = 12
max_device_size = 120

[partition]
name = "natural"
num_clients = 12

[model]
name = "logreg"

[participation]
name = "uniform"
clients_per_round = 4

[client]
learning_rate = 0.05
batch_size = 16
"""


def small_toml(**run) -> str:
    """The small federation as an experiment file, with ``[run]`` holding ``run`` (FedAvg, one local
    epoch: the defaults)."""
    def literal(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        return f'"{value}"' if isinstance(value, str) else str(value)
    return "[run]\n" + "".join(f"{key} = {literal(value)}\n" for key, value in run.items()) + _FEDERATION_TOML


class StopAfter(Callback):
    """Simulates a crash: raises after round k's callbacks (those before it in the list) ran."""

    def __init__(self, k):
        self.k = k

    def on_round_end(self, run, record):
        if record["round"] == self.k:
            raise KeyboardInterrupt


def skip_run_plots(monkeypatch) -> None:
    """Leave out a run's pictures (``partition.png``, ``participation.png``): drawing them takes most of
    a small run's seconds and no number depends on them. ``participation.pt`` is still written."""
    import fedhet.participation.plots
    from fedhet.engine import run_plots

    monkeypatch.setattr(run_plots, "write_partition_plot", lambda handle: None)
    monkeypatch.setattr(fedhet.participation.plots, "plot_participation_raster", lambda *args, **kwargs: None)
