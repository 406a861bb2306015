"""MLflow: one MLflow run per fedhet run, in a local ``file:`` store by default.

The store defaults to ``mlruns`` beside the run directory (``out_dir/mlruns``; for a sweep, inside
the sweep directory), the experiment to ``run.tracker_project``, else the sweep's name, else
``fedhet``. Switches that MLflow reads from the environment are set only around its calls: its
file store (in maintenance mode since MLflow 3, refused unless ``MLFLOW_ALLOW_FILE_STORE``) and its
usage telemetry (off: nothing leaves the machine unless ``run.mlflow_uri`` names a server). On
resume the saved run id is reopened and the last round is read back from the store itself.
"""
from __future__ import annotations

import contextlib
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

from fedhet.errors import FedhetError
from fedhet.tracking.base import Tracker, TrackingContext, numeric_items, scoped_environ, started
from fedhet.tracking.layout import headline_summary, metric_name

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

ENVIRONMENT = {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
STORE_DIR = "mlruns"
# MLflow's per-request limits (log_batch): 1000 metrics, 100 parameters.
_METRICS_PER_BATCH = 1000
_PARAMS_PER_BATCH = 100
_PARAM_LENGTH = 6000


# How long to wait for a TCP connection to an MLflow server before saying nothing answers there
# (MLflow itself retries a refused connection with back-off for minutes: 249 s in finding H4).
CONNECT_TIMEOUT_SECONDS = 5.0


class MlflowServerUnreachableError(FedhetError, ConnectionError):
    """``run.mlflow_uri`` names an HTTP(S) server where nothing answers."""


def check_server(uri: str) -> None:
    """For an ``http(s)://`` tracking URI, raise :class:`MlflowServerUnreachableError` within
    :data:`CONNECT_TIMEOUT_SECONDS` when no TCP connection opens there; other stores are local."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        with socket.create_connection((parsed.hostname or "127.0.0.1", port), timeout=CONNECT_TIMEOUT_SECONDS):
            pass
    except (OSError, ValueError) as error:
        raise MlflowServerUnreachableError(
            f"run.mlflow_uri = {uri!r}: no MLflow server answers there ({error}); start it, or leave "
            "run.mlflow_uri unset for the local store beside the run directory") from None


def default_tracking_uri(run_dir: Path) -> str:
    return (run_dir.resolve().parent / STORE_DIR).as_uri()


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock on a local ``file:`` store while an experiment is looked up or made.

    The file store checks an experiment name by listing folders, so two sweep workers starting
    together could each create the sweep's experiment; the lock makes the second find the first's.
    Other stores (a server, a database) enforce unique names themselves.
    """
    try:
        import fcntl
    except ImportError:                 # not POSIX: no lock (parallel sweep workers may race there)
        fcntl = None
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("file", "") or fcntl is None:
        yield
        return
    store = Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme else Path(uri)
    store.mkdir(parents=True, exist_ok=True)
    with open(store / ".fedhet-experiments.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class MlflowTracker(Tracker):
    name = "mlflow"

    def __init__(self):
        self.client: Optional[MlflowClient] = None
        self.run_id = ""

    def _environment(self):
        return scoped_environ(ENVIRONMENT)

    def start(self, context: TrackingContext, saved: Optional[dict[str, Any]]) -> dict[str, Any]:
        with self._environment():
            from mlflow.exceptions import MlflowException

            uri = saved["tracking_uri"] if saved else (context.options.mlflow_uri
                                                       or default_tracking_uri(context.run_dir))
            check_server(uri)
            try:
                return self._start(context, saved, uri)
            except MlflowException as error:
                if urllib.parse.urlparse(uri).scheme not in ("http", "https"):
                    raise
                # Something answers there, but not as an MLflow server does (another web server's 404).
                raise MlflowServerUnreachableError(
                    f"run.mlflow_uri = {uri!r}: the server there does not answer as an MLflow tracking server "
                    f"({str(error).splitlines()[0][:200] if str(error) else type(error).__name__}); check the "
                    "URI, or leave run.mlflow_uri unset for the local store beside the run directory") from None

    def _start(self, context: TrackingContext, saved: Optional[dict[str, Any]], uri: str) -> dict[str, Any]:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        if saved:
            self.run_id = saved["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return dict(saved)
        experiment_id = self._experiment_id(context.project)
        # setting and seed as tags: the MLflow runs table groups the seeds of a setting by them.
        tags = {"fedhet.run_dir": str(context.run_dir.resolve()), "setting": context.setting,
                "seed": str(context.seed)}
        if context.sweep is not None:
            tags["fedhet.sweep"] = context.sweep
        run = self.client.create_run(experiment_id, run_name=context.run_name, tags=tags)
        self.run_id = run.info.run_id
        return {"tracking_uri": uri, "experiment_id": experiment_id, "run_id": self.run_id}

    def _experiment_id(self, name: str) -> str:
        with _store_lock(started(self.client, self.name).tracking_uri):
            return self._get_or_create_experiment(name)

    def _get_or_create_experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        client = started(self.client, self.name)
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return client.create_experiment(name)
        except MlflowException:
            # Another worker of the same sweep created it between the lookup and the creation.
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def last_logged_round(self) -> Optional[int]:
        with self._environment():
            history = started(self.client, self.name).get_metric_history(self.run_id, metric_name("test_accuracy"))
        return max((int(metric.step) for metric in history), default=0)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)[:_PARAM_LENGTH]) for key, value in params.items()]
        client = started(self.client, self.name)
        with self._environment():
            for start in range(0, len(items), _PARAMS_PER_BATCH):
                client.log_batch(self.run_id, params=items[start:start + _PARAMS_PER_BATCH])

    def _log_metrics(self, metrics: list) -> None:
        client = started(self.client, self.name)
        with self._environment():
            for start in range(0, len(metrics), _METRICS_PER_BATCH):
                client.log_batch(self.run_id, metrics=metrics[start:start + _METRICS_PER_BATCH])

    def log_rounds(self, records: list[dict[str, Any]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._log_metrics([Metric(key, value, now, int(record["round"]))
                           for record in records for key, value in numeric_items(record).items()])

    def log_summary(self, summary: Mapping[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        # The headline values only; the whole summary.json is an artifact (log_files).
        self._log_metrics([Metric(name, number, now, step) for name, number in headline_summary(summary).items()])

    def log_files(self, paths: list[Path], run_dir: Path) -> None:
        client = started(self.client, self.name)
        with self._environment():
            for path in paths:
                folder = "plots" if path.suffix.lower() == ".png" else None
                client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def close(self) -> None:
        if self.client is not None:
            with self._environment():
                self.client.set_terminated(self.run_id)
            self.client = None
