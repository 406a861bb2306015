"""fedhet.tracking.base.started: a tracker used before start() (or after close()) says so, by name."""
import pytest

from fedhet.tracking.base import started
from fedhet.tracking.mlflow import MlflowTracker
from fedhet.tracking.tensorboard import TensorBoardTracker
from fedhet.tracking.wandb import WandbTracker


def test_started_returns_the_handle_it_is_given():
    handle = object()
    assert started(handle, "tensorboard") is handle


def test_started_refuses_none_naming_the_tracker():
    with pytest.raises(RuntimeError, match=r"tracker 'mlflow' used before start\(\) or after close\(\)"):
        started(None, "mlflow")


@pytest.mark.parametrize("tracker_cls, tool", [(TensorBoardTracker, "tensorboard"), (MlflowTracker, "mlflow"),
                                               (WandbTracker, "wandb")])
def test_logging_before_start_is_a_clear_error(tracker_cls, tool):
    pytest.importorskip(tool)        # MlflowTracker.log_rounds imports mlflow's Metric first
    tracker = tracker_cls()
    with pytest.raises(RuntimeError, match=f"tracker '{tracker_cls.name}' used before start"):
        tracker.log_rounds([{"round": 1, "test_accuracy": 0.5}])
