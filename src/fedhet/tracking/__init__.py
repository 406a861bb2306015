"""Experiment trackers (TensorBoard, MLflow, W&B) chosen by ``run.trackers``; see docs/tracking.md.

Each tracker's package is optional (``pip install 'fedhet[tracking]'``) and imported only when a
run uses it.
"""
from fedhet.tracking.names import INSTALL_HINT, TRACKER_MODULES, TrackerUnavailableError, check_trackers_installed

__all__ = ["INSTALL_HINT", "TRACKER_MODULES", "TrackerUnavailableError", "check_trackers_installed"]
