"""Reports: many run directories -> the papers' kind of table and plots (``fedhet report``, ``fedhet.load_runs``).

- :mod:`fedhet.report.runs`, :mod:`fedhet.report.stats`, :mod:`fedhet.report.grouping`: run directories
  -> groups of seeds -> mean and sample std; :mod:`fedhet.report.analysis`: the runs as one table.
- :mod:`fedhet.report.build`: ``report.md``, ``report.json``, ``report.html``, ``report.csv`` and plots
  (:mod:`fedhet.report.data`, :mod:`fedhet.report.tables`, :mod:`fedhet.report.markdown`,
  :mod:`fedhet.report.html`, :mod:`fedhet.report.export`, :mod:`fedhet.report.plots`,
  :mod:`fedhet.report.time_curves`, :mod:`fedhet.report.client_report`).
- :mod:`fedhet.report.difference`: a paired or Welch difference over seeds with its Student-t interval,
  read by ``--baseline`` (:mod:`fedhet.report.baseline`, drawn by :mod:`fedhet.report.forest`) and by
  the claims' verdicts (:mod:`fedhet.claims.verdict`).
- :mod:`fedhet.report.commands`: the ``fedhet report`` command.

The runs come from :mod:`fedhet.sweep` (or single ``fedhet run`` calls); the claims' report builds on
this one (:mod:`fedhet.claims`).
"""
