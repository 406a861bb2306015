"""Weights & Biases: one W&B run per fedhet run, offline by default.

Offline (``run.wandb_mode = "offline"``, the default) writes only ``RUN_DIR/wandb``: the offline
run, and W&B's cache, config and staging folders, which are pointed there too; ``wandb sync
RUN_DIR/wandb/offline-run-*`` uploads it later. ``online`` is the user's explicit choice to send it.
A sweep's runs share the W&B group named after the sweep. W&B's switches are set in the environment
only around its calls. On resume the saved run id is reopened (``resume="allow"``); rounds up to the
last step the offline files really hold (online: the last one this tracker sent) are not sent again.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from fedhet.errors import FedhetError
from fedhet.tracking.base import Tracker, TrackingContext, numeric_items, scoped_environ, started
from fedhet.tracking.layout import headline_summary
from fedhet.tracking.wandb_offline import last_offline_step

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

WANDB_DIR = "wandb"


def wandb_environment(run_dir: Path, mode: str) -> dict[str, str]:
    """The environment W&B runs under: the chosen mode, no console capture, no git or code upload,
    and (offline) every folder it writes inside ``RUN_DIR/wandb``."""
    root = (run_dir / WANDB_DIR).resolve()
    environment = {"WANDB_MODE": mode, "WANDB_SILENT": "true", "WANDB_CONSOLE": "off",
                   "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true",
                   "WANDB_CACHE_DIR": str(root / ".cache"), "WANDB_DATA_DIR": str(root / ".data"),
                   "WANDB_ARTIFACT_DIR": str(root / ".artifacts")}
    if mode == "offline":
        # Online runs keep the user's W&B settings (entity, host); offline ones read nothing from home.
        environment["WANDB_CONFIG_DIR"] = str(root / ".config")
    return environment


class WandbSetupError(FedhetError, RuntimeError):
    """W&B refused to start a run (online mode without a key, ...)."""


class WandbTracker(Tracker):
    name = "wandb"

    def __init__(self):
        self.run: Optional[Run] = None
        self.environment: dict[str, str] = {}
        self.resumed_at: Optional[int] = None

    def start(self, context: TrackingContext, saved: Optional[dict[str, Any]]) -> dict[str, Any]:
        mode = saved["mode"] if saved else context.options.wandb_mode
        self.environment = wandb_environment(context.run_dir, mode)
        (context.run_dir / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        with scoped_environ(self.environment):
            import wandb
            import wandb.errors  # by name: `import wandb` alone does not declare it to type checkers

            # A random id: two runs with the same config must stay two W&B runs (ids carry no results).
            run_id = saved["run_id"] if saved else uuid.uuid4().hex[:12]
            if saved and mode == "offline":
                # What the earlier offline segments hold, read before this process adds its own.
                self.resumed_at = last_offline_step(context.run_dir / WANDB_DIR, run_id)
            settings = wandb.Settings(mode=mode, silent=True, console="off", disable_git=True,
                                      save_code=False, x_disable_stats=True)
            # job_type is the setting (W&B caps it at 64 characters): the runs table groups seeds by it.
            try:
                self.run = wandb.init(project=context.project, group=context.sweep, name=context.run_name,
                                      job_type=context.setting[:64] or None,
                                      id=run_id, resume="allow", dir=str(context.run_dir.resolve()),
                                      config=context.config, settings=settings, reinit="create_new")
            except wandb.errors.UsageError as error:
                # e.g. online mode without an API key: the user's to fix, not a bug.
                raise WandbSetupError(f"run.wandb_mode = {mode!r}: W&B refused to start: "
                                      f"{str(error).splitlines()[0] if str(error) else type(error).__name__}; "
                                      "log in with `wandb login`, or use run.wandb_mode = 'offline'") from None
        return {"run_id": run_id, "project": context.project, "mode": mode}

    def last_logged_round(self) -> Optional[int]:
        # Offline: the step the files hold. Online (not tested here: no network), the saved state.
        return self.resumed_at

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass  # the config went to wandb.init (W&B's hyperparameters), nested as config.toml has it

    def log_rounds(self, records: list[dict[str, Any]]) -> None:
        run = started(self.run, self.name)
        with scoped_environ(self.environment):
            for record in records:
                run.log(numeric_items(record), step=int(record["round"]))

    def log_summary(self, summary: Mapping[str, Any], step: int) -> None:
        with scoped_environ(self.environment):
            # The headline values; the whole summary.json is a run file (log_files).
            started(self.run, self.name).summary.update(headline_summary(summary))

    def log_files(self, paths: list[Path], run_dir: Path) -> None:
        run = started(self.run, self.name)
        with scoped_environ(self.environment):
            for path in paths:
                run.save(str(path.resolve()), base_path=str(run_dir.resolve()), policy="now")

    def close(self) -> None:
        if self.run is not None:
            with scoped_environ(self.environment):
                self.run.finish()
                import wandb

                # W&B's service process outlives a run and keeps the folders it was started with;
                # ending it (when no other W&B run is active here) lets the next run of this process
                # (a sweep in one process) write only into its own directory.
                if wandb.run is None:
                    wandb.teardown()
            self.run = None
