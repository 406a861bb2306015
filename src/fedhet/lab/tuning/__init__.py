"""Hyperparameter search for one method (``fedhet tune``), chosen without the test set (docs/tuning.md), and the
claims' pre-registered tuning (``fedhet tune-claims``: :mod:`fedhet.lab.tuning.preregistered`,
:mod:`fedhet.lab.tuning.staged`, :mod:`fedhet.lab.tuning.plan_outputs`). The commands are
:mod:`fedhet.lab.commands.tune` and :mod:`fedhet.lab.commands.tune_claims`."""
