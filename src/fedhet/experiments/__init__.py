"""Experiments: sweeps over settings and seeds, and the papers' kind of report over many runs.

- :mod:`fedhet.experiments.grid`: ``--grid key=v1,v2``, ``--seeds``, variants files, run names.
- :mod:`fedhet.experiments.plan`: a sweep's runs as resolved configurations, and each run's state
  on disk (new, to resume, finished).
- :mod:`fedhet.experiments.sweep`: runs the plan, in this process or as parallel worker processes,
  with a progress view (:mod:`fedhet.experiments.progress`).
- :mod:`fedhet.experiments.runs`, :mod:`fedhet.experiments.stats`,
  :mod:`fedhet.experiments.grouping`: run directories -> groups of seeds -> mean and sample std.
- :mod:`fedhet.experiments.report`: ``report.md``, ``report.json``, ``report.html`` and plots
  (:mod:`fedhet.experiments.plots`, :mod:`fedhet.experiments.markdown`, :mod:`fedhet.experiments.html`).
- :mod:`fedhet.experiments.claims`: the papers' claims as data, run as one sweep, each with a verdict
  (``fedhet claims``; ``docs/claims.md``).
"""
