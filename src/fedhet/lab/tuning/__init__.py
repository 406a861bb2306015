"""Hyperparameter search for one method (``fedhet tune``), chosen without the test set (docs/tuning.md)."""
