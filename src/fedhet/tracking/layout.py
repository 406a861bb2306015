"""How a run is laid out in the trackers: metric names under prefixes, the headline summary values,
the run's short name and its setting and seed tags, and the commands that open the viewers.

Rules (docs/tracking.md, "Names in the trackers"):

- **Per-round metrics** are grouped by a prefix before ``/``, the way TensorBoard and MLflow group
  their charts: ``test/`` (the global model on the test set), ``train/`` (the clients' local
  losses), ``clients/`` (per-client evaluation), a method's own diagnostics under the method's name
  (``fedaware/``, ``fedmgda/``, ``fedau/``, ...) and every other diagnostic under ``diag/``.
  ``metrics.jsonl`` keeps its flat names; only the trackers see the prefixed ones.
- **The summary**: a few headline values are run metrics (``summary/<key>``); the whole
  ``summary.json`` is an artifact (MLflow, W&B) or a text entry (TensorBoard), so the tools' run
  pages do not open on a wall of single-point charts.
- **Run names lead with what differs**: a sweep's run is named by its variant, its grid values (a
  grid over ``algorithm`` by the method's name alone) and its seed (``fedavgm
  server.learning_rate=0.1 seed=2``, ``scaffold seed=1``); the sweep's name is the
  MLflow experiment / W&B group, so it is not repeated. The ``setting`` (the name without the seed)
  and the ``seed`` are tags, so MLflow can group the seeds of one setting.
"""
from __future__ import annotations

import dataclasses
import math
import shlex
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

# Record key -> tracker name, for the keys whose group is not given by a prefix rule below.
_EXACT = {
    "test_accuracy": "test/accuracy",
    "test_loss": "test/loss",
    "train_loss": "train/loss",
    "control_variate_change": "scaffold/control_variate_change",
}
# (record key prefix, what replaces it): per-client evaluation, and a method's own diagnostics
# under the method's name.
_PREFIXES = (
    ("client_accuracy_", "clients/accuracy_"),
    ("aware_", "fedaware/"),
    ("mgda_", "fedmgda/"),
    ("fedau_", "fedau/"),
    ("fednova_", "fednova/"),
    ("feddyn_", "feddyn/"),
    ("known_weight_", "known_participation/weight_"),
)
DIAGNOSTICS = "diag"

# The summary values sent as run metrics, in this order; the rest stay in the summary.json artifact.
HEADLINE_SUMMARY = ("final_accuracy", "best_accuracy", "last10_accuracy", "final_test_loss",
                    "rounds_to_target", "final_client_accuracy_worst10", "e_ludd", "seconds_per_round")


def metric_name(key: str) -> str:
    """The tracker name of a ``metrics.jsonl`` key (see the module docstring)."""
    if key in _EXACT:
        return _EXACT[key]
    for prefix, replacement in _PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            return replacement + key[len(prefix):]
    return f"{DIAGNOSTICS}/{key}"


def headline_summary(summary: Mapping[str, Any]) -> dict[str, float]:
    """The headline values of ``summary.json`` that are finite numbers, as ``summary/<key>``."""
    out = {}
    for key in HEADLINE_SUMMARY:
        value = summary.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[f"summary/{key}"] = float(value)
    return out


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """How the trackers name a run: ``name`` (what differs, then the seed), ``setting`` (the name
    without the seed: the tag that groups seeds) and ``seed``."""

    name: str
    setting: str
    seed: int


def run_identity(run_name: str, seed: int, sweep_run: Optional[Mapping[str, Any]] = None) -> RunIdentity:
    """A sweep run (``sweep_run`` is its ``sweep_run.json``: label, assignments, base_name) is named
    by its variant and grid values (the sweep's name when only the seed varies); a single run by its
    ``run.name``. Both end with ``seed=<seed>``."""
    setting = run_name
    if sweep_run:
        parts = [str(sweep_run.get("label") or "")]
        # A grid over the algorithm shows the method's name alone: it is what a reader looks for.
        parts += [str(value) if key == "algorithm" else f"{key}={value}"
                  for key, value in dict(sweep_run.get("assignments") or {}).items()]
        setting = " ".join(part for part in parts if part) or str(sweep_run.get("base_name") or run_name)
    return RunIdentity(f"{setting} seed={seed}", setting, int(seed))


# TensorBoard lists its sections alphabetically (clients, diag, fedaware, ..., test, train); its
# Scalars page, opened with this tag filter, starts with the test and train curves (the other
# sections follow). 6006 is TensorBoard's default port.
TENSORBOARD_URL = "http://127.0.0.1:6006/#scalars&tagFilter=%5E(test%7Ctrain)%2F"


def tensorboard_command(runs: Sequence[tuple[str, Path]]) -> str:
    """``tensorboard`` over the ``(name, log directory)`` pairs: one directory is ``--logdir``; several
    are ``--logdir_spec name:dir,...``, so TensorBoard's run list shows each run by its short name
    (``fedavg seed=1/.``) instead of a path cut before the part that differs. Then the page to open."""
    if len(runs) == 1:
        command = f"tensorboard --logdir {shlex.quote(str(runs[0][1]))} --host 127.0.0.1"
    else:
        spec = ",".join(f"{name.replace(',', ' ').replace(':', '=')}:{path}" for name, path in runs)
        command = f"tensorboard --logdir_spec {shlex.quote(spec)} --host 127.0.0.1"
    return f"{command}   (then open {TENSORBOARD_URL})"


def mlflow_command(uri: str, *, mlflow_ui: Optional[bool] = None) -> str:
    """``mlflow ui`` on a local store, SQLite or ``file:`` (with what to install when only mlflow-skinny
    is here), or the server's address. ``mlflow_ui``: whether ``mlflow ui`` can start (default: asked
    of the packages)."""
    from fedhet.tracking.names import MLFLOW_UI_HINT, mlflow_ui_available

    if not uri.startswith(("file:", "sqlite:")):
        return f"MLflow: open {uri}"
    ready = mlflow_ui_available() if mlflow_ui is None else mlflow_ui
    return (f"mlflow ui --backend-store-uri {shlex.quote(uri)} --host 127.0.0.1"
            + ("" if ready else f"   ({MLFLOW_UI_HINT})"))


def viewer_commands(state: Mapping[str, Mapping[str, Any]], run_dir: Path, *,
                    mlflow_ui: Optional[bool] = None) -> list[str]:
    """The commands that show one run in each tool of ``state`` (its ``tracking.json``)."""
    commands = []
    run_dir = Path(run_dir)
    if "tensorboard" in state:
        commands.append(tensorboard_command([("", run_dir / "tensorboard")]))
    if "mlflow" in state and state["mlflow"].get("tracking_uri"):
        commands.append(mlflow_command(str(state["mlflow"]["tracking_uri"]), mlflow_ui=mlflow_ui))
    if "wandb" in state:
        if state["wandb"].get("mode") == "offline":
            commands.append(f"wandb sync {shlex.quote(str(run_dir / 'wandb'))}/offline-run-*")
        else:
            commands.append(f"W&B: project {state['wandb'].get('project')}")
    return commands


def sweep_viewer_commands(runs: Sequence[tuple[RunIdentity, Path, Mapping[str, Any]]], *,
                          mlflow_ui: Optional[bool] = None) -> list[str]:
    """The commands that show a sweep's tracked runs side by side: ``runs`` holds each run's identity,
    directory and ``tracking.json`` state (runs that tracked nothing are left out)."""
    commands = []
    boards = [(identity.name, run_dir / "tensorboard") for identity, run_dir, state in runs if "tensorboard" in state]
    if boards:
        commands.append(tensorboard_command(boards))
    uris = sorted({str(state["mlflow"]["tracking_uri"]) for _identity, _dir, state in runs
                   if state.get("mlflow", {}).get("tracking_uri")})
    commands += [mlflow_command(uri, mlflow_ui=mlflow_ui) for uri in uris]
    if any(state.get("wandb", {}).get("mode") == "offline" for _identity, _dir, state in runs):
        commands.append("wandb sync RUN_DIR/wandb/offline-run-*   (each run directory of the sweep)")
    return commands
