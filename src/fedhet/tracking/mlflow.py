"""MLflow: one MLflow run per fedhet run, in one local SQLite store per output directory by default.

The store defaults to ``mlflow.db`` beside the run directory (``out_dir/mlflow.db``; for a sweep,
inside the sweep directory, so the sweep's runs are one store that ``mlflow ui`` shows together):
SQLite, MLflow's own default since 3.7, with the runs' artifacts in ``out_dir/mlartifacts``. A
``file:`` store that an earlier fedhet made there (``out_dir/mlruns``, and no ``mlflow.db``) is kept,
as ``mlflow server`` keeps an existing ``./mlruns``, so a sweep is never split between two stores;
``run.mlflow_uri`` names any other store, a ``file:`` one included (docs/tracking.md says how to
migrate one to SQLite). The experiment is ``run.tracker_project``, else the sweep's name, else
``fedhet``. Switches that MLflow reads from the environment are set only around its calls: its
file store (in maintenance mode since MLflow 3, refused unless ``MLFLOW_ALLOW_FILE_STORE``) and its
usage telemetry (off: nothing leaves the machine unless ``run.mlflow_uri`` names a server). On
resume the saved run id is reopened, in the store it was made in, and the last round is read back
from the store itself.
"""
from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

from fedhet.core.lock_files import open_lock_file
from fedhet.errors import FedhetError
from fedhet.tracking.base import Tracker, TrackingContext, numeric_items, scoped_environ, started
from fedhet.tracking.layout import headline_summary, metric_name

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

ENVIRONMENT = {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
STORE_FILE = "mlflow.db"            # the default store: SQLite, beside the run directory
ARTIFACTS_DIR = "mlartifacts"       # its runs' artifacts (what `mlflow server` calls its default too)
STORE_DIR = "mlruns"                # a file: store an earlier fedhet made there, kept until migrated
# How long a process waits for another's hold on a local store (creating its tables, or the
# sweep's experiment) before saying so.
STORE_LOCK_TIMEOUT_SECONDS = 120.0
# MLflow's per-request limits (log_batch): 1000 metrics, 100 parameters.
_METRICS_PER_BATCH = 1000
_PARAMS_PER_BATCH = 100
_PARAM_LENGTH = 6000


# How long to wait for a TCP connection to an MLflow server before saying nothing answers there
# (MLflow itself retries a refused connection with back-off for minutes: 249 s measured).
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


class MlflowStoreError(FedhetError, OSError):
    """The default local store's path is not a regular file, or another process held it too long."""


def sqlite_uri(path: Path) -> str:
    """``sqlite:////abs/path`` for a local database file, its path percent-quoted (SQLAlchemy unquotes
    it), so that a directory named with ``?``, ``%`` or spaces is the file opened."""
    return "sqlite:///" + urllib.parse.quote(str(path.absolute()))


def sqlite_path(uri: str) -> Optional[Path]:
    """The file of a local ``sqlite:`` URI (None for other URIs and for SQLite in memory)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = urllib.parse.unquote(uri[len("sqlite:///"):].split("?", 1)[0])
    return Path(path) if path and path != ":memory:" else None


def file_store_path(uri: str) -> Optional[Path]:
    """The folder of a local ``file:`` store (or a plain path, which MLflow reads as one); None for others."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme == "" and uri:
        return Path(uri)
    return None


def default_tracking_uri(run_dir: Path) -> str:
    """The store of a run in ``run_dir`` when ``run.mlflow_uri`` is unset: ``mlflow.db`` beside the run
    directory (every run of a sweep shares it), or the ``mlruns`` file store an earlier fedhet made
    there while no ``mlflow.db`` exists (module docstring)."""
    out = run_dir.resolve().parent
    if (out / STORE_DIR).is_dir() and not os.path.lexists(out / STORE_FILE):
        return (out / STORE_DIR).as_uri()
    return sqlite_uri(out / STORE_FILE)


def artifact_location(uri: str) -> Optional[str]:
    """Where an experiment that fedhet creates keeps its runs' artifacts: beside a local SQLite
    database (MLflow's own default would be ``./mlruns`` in the working directory, outside the output
    directory); MLflow's default for any other store (inside a ``file:`` store, a server's root)."""
    path = sqlite_path(uri)
    return (path.parent / ARTIFACTS_DIR).as_uri() if path is not None else None


def _check_database_file(path: Path) -> None:
    """Refuse a database path that is a symbolic link or not a regular file: SQLite would write
    through a link planted in the output directory into a file outside it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        raise MlflowStoreError(f"{path} is {'a symbolic link' if stat.S_ISLNK(info.st_mode) else 'not a regular file'}; "
                               "fedhet does not open it as its MLflow store: remove it, or set run.mlflow_uri")


def _check_sqlalchemy() -> None:
    """MLflow's SQLite store needs SQLAlchemy and Alembic, which the full mlflow package installs and
    mlflow-skinny does not: without them, one line that says what to install."""
    import importlib.util

    from fedhet.tracking.names import INSTALL_HINT, TrackerUnavailableError

    missing = [name for name in ("sqlalchemy", "alembic") if importlib.util.find_spec(name) is None]
    if missing:
        raise TrackerUnavailableError(
            f"MLflow's SQLite store (the default, mlflow.db beside the run directory) needs {' and '.join(missing)}, "
            f"which mlflow-skinny does not install: {INSTALL_HINT} (the full mlflow), pip install sqlalchemy "
            "alembic, or set run.mlflow_uri to a file: store")


def _lock_path(uri: str) -> Optional[Path]:
    """The lock file of a local store: beside a SQLite database, inside a file store; None for others."""
    database = sqlite_path(uri)
    if database is not None:
        return database.parent / f".{database.name}.fedhet-lock"
    store = file_store_path(uri)
    return store / ".fedhet-experiments.lock" if store is not None else None


@contextlib.contextmanager
def _store_lock(uri: str, timeout: float = STORE_LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    """Hold an exclusive lock on a local store while it is opened and the experiment looked up or made.

    Sweep workers start together: on a new SQLite database each would create MLflow's tables (its
    migrations are not safe to run twice at once), and the file store checks an experiment name by
    listing folders, so two could each create the sweep's experiment. The lock makes the second
    find the first's. The wait is bounded by ``timeout`` seconds. Servers and other databases
    enforce unique names themselves.
    """
    try:
        import fcntl
    except ImportError:                 # not POSIX: no lock (parallel sweep workers may race there)
        fcntl = None
    path = _lock_path(uri)
    if path is None or fcntl is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(path)          # no link followed, a regular file only
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise MlflowStoreError(f"the MLflow store {uri} stayed locked by another process for "
                                           f"{timeout:.0f} s ({path}); is a fedhet run stuck there?") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


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

            # A resumed run stays in the store it was made in (a file: store included).
            default = not saved and not context.options.mlflow_uri
            uri = saved["tracking_uri"] if saved else (context.options.mlflow_uri
                                                       or default_tracking_uri(context.run_dir))
            check_server(uri)
            database = sqlite_path(uri)
            if database is not None:
                _check_sqlalchemy()
                if default:
                    _check_database_file(database)
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

        with _store_lock(uri):
            # Opening a new SQLite store creates its tables: under the lock, with the experiment.
            self.client = MlflowClient(tracking_uri=uri)
            if saved:
                self.run_id = saved["run_id"]
                self.client.update_run(self.run_id, status="RUNNING")
                return dict(saved)
            experiment_id = self._get_or_create_experiment(context.project, artifact_location(uri))
        # setting and seed as tags: the MLflow runs table groups the seeds of a setting by them.
        tags = {"fedhet.run_dir": str(context.run_dir.resolve()), "setting": context.setting,
                "seed": str(context.seed)}
        if context.sweep is not None:
            tags["fedhet.sweep"] = context.sweep
        run = self.client.create_run(experiment_id, run_name=context.run_name, tags=tags)
        self.run_id = run.info.run_id
        return {"tracking_uri": uri, "experiment_id": experiment_id, "run_id": self.run_id}

    def _get_or_create_experiment(self, name: str, artifacts: Optional[str]) -> str:
        from mlflow.exceptions import MlflowException

        client = started(self.client, self.name)
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return client.create_experiment(name, artifact_location=artifacts)
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
