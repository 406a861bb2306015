"""What a run checks and records before its first round, beyond the configuration itself: the
memory and disk it will need (:mod:`fedhet.engine.resources`) and the dataset files it read
(:mod:`fedhet.data.provenance`). Kept out of the runner so each stays one job."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from fedhet.core.dataset import DatasetBundle
from fedhet.core.io import atomic_write_json
from fedhet.data.provenance import DATA_FILES_NAME, data_files_record
from fedhet.engine.resources import check_resources, needs_for_run


def check_run_resources(config: Any, task: Any, run_dir: Path, log: Callable[[str], None]) -> None:
    """Refuse (or warn about) a run that needs more memory or disk than the machine has
    (``run.resource_check``; the rule is in :mod:`fedhet.engine.resources`)."""
    if config.run.resource_check == "off":
        return
    needs, unmeasured = needs_for_run(config, task)
    check_resources(needs, mode=config.run.resource_check, run_dir=run_dir, store_device=str(task.device),
                    log=log, unmeasured=unmeasured)


def write_data_files(run_dir: Path, config: Any, bundle: DatasetBundle) -> None:
    """``data_files.json``: the dataset files this run read, with their sha256 (:mod:`fedhet.data.provenance`)."""
    options = config.data.options
    root = getattr(options, "root", None)
    record = data_files_record(bundle, dataset=config.data.name, root=root, generated=not hasattr(options, "root"))
    atomic_write_json(run_dir / DATA_FILES_NAME, record)
