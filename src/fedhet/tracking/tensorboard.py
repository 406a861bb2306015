"""TensorBoard: event files in ``RUN_DIR/tensorboard`` (``tensorboard --logdir`` on a sweep directory
shows every run of the sweep, one log directory each).

Scalars are TensorBoard's classic float32 ``simple_value``: the form its scalar dashboards read (its
data server showed no float64 scalars here), so a value read back is the ``metrics.jsonl`` value
rounded to float32. On resume the writer reopens the same directory with
``purge_step`` = the first round not yet logged, so TensorBoard drops any later event a killed run
may have left and no step is shown twice.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from fedhet.tracking.base import Tracker, TrackingContext, numeric_items, started
from fedhet.tracking.layout import headline_summary

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

LOG_DIR = "tensorboard"


class TensorBoardTracker(Tracker):
    name = "tensorboard"

    def __init__(self):
        self.writer: Optional[SummaryWriter] = None

    def start(self, context: TrackingContext, saved: Optional[dict[str, Any]]) -> dict[str, Any]:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = context.run_dir / LOG_DIR
        purge_step = None if saved is None else int(saved.get("last_round", 0)) + 1
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step, flush_secs=3600)
        if saved is None:
            self.writer.add_text("config", "```toml\n" + context.config_toml + "\n```", global_step=0)
        return {"log_dir": LOG_DIR}

    def log_params(self, params: Mapping[str, Any]) -> None:
        # The HPARAMS tab of TensorBoard, written into this run's own event file (SummaryWriter.add_hparams
        # would open a second run directory).
        from torch.utils.tensorboard.summary import hparams

        values = {key: (value if isinstance(value, (bool, int, float, str)) else str(value))
                  for key, value in params.items()}
        experiment, start, end = hparams(values, {"test/accuracy": float("nan")})
        file_writer = started(self.writer, self.name).file_writer
        assert file_writer is not None      # SummaryWriter opens it in __init__
        for summary in (experiment, start, end):
            file_writer.add_summary(summary)

    def log_rounds(self, records: list[dict[str, Any]]) -> None:
        writer = started(self.writer, self.name)
        for record in records:
            for key, value in numeric_items(record).items():
                writer.add_scalar(key, value, global_step=int(record["round"]))
        writer.flush()

    def log_summary(self, summary: Mapping[str, Any], step: int) -> None:
        writer = started(self.writer, self.name)
        for name, number in headline_summary(summary).items():
            writer.add_scalar(name, number, global_step=step)
        writer.add_text("summary", "```json\n" + json.dumps(summary, indent=1, sort_keys=True) + "\n```",
                        global_step=step)
        writer.flush()

    def log_files(self, paths: list[Path], run_dir: Path) -> None:
        import matplotlib.image

        writer = started(self.writer, self.name)
        for path in paths:
            if path.suffix.lower() != ".png":
                continue
            pixels = matplotlib.image.imread(str(path))     # float in [0, 1], H x W x (3 or 4)
            if pixels.ndim == 2:
                pixels = pixels[:, :, None].repeat(3, axis=2)
            image = (pixels[:, :, :3] * 255).round().astype("uint8")
            writer.add_image(f"plots/{path.stem}", image, global_step=0, dataformats="HWC")
        writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
