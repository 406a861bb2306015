"""The lab's verbs of the ``fedhet`` command, one module each, every one of the same shape:
``add_parser(subparsers)`` adds the verb with its flags, help texts and sub-actions, and ``run(args)``
handles it and returns the exit status (a verb with sub-actions, ``claims``, dispatches on the one
given). :mod:`fedhet.cli` keeps the library's own verbs and adds these in the order of
:data:`LAB_COMMANDS`, the order ``fedhet --help`` lists them.

- :mod:`~fedhet.lab.commands.sweep`: ``fedhet sweep`` (settings x seeds, :mod:`fedhet.lab.sweep`);
- :mod:`~fedhet.lab.commands.report`: ``fedhet report`` (run directories -> tables, :mod:`fedhet.lab.report`);
- :mod:`~fedhet.lab.commands.claims`: ``fedhet claims list|run|report|export|rejudge|pilot``
  (:mod:`fedhet.lab.claims`);
- :mod:`~fedhet.lab.commands.tune`: ``fedhet tune`` (one method's hyperparameters, :mod:`fedhet.lab.tuning`);
- :mod:`~fedhet.lab.commands.tune_claims`: ``fedhet tune-claims`` (the claims' pre-registered tuning);
- :mod:`~fedhet.lab.commands.executor_flags` and :mod:`~fedhet.lab.commands.shared`: the executor flags
  of ``sweep`` and ``claims run``, and the verbs' exit codes, output streams and plan runner.

The handlers import what they run when they run, so that ``fedhet --help`` stays quick.
"""
from __future__ import annotations

from fedhet.lab.commands import claims, report, sweep, tune, tune_claims

LAB_COMMANDS = (sweep, report, claims, tune, tune_claims)
