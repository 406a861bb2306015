"""Reports: many run directories -> the papers' kind of table and plots (``fedhet report``, ``fedhet.load_runs``).

- :mod:`fedhet.lab.report.runs`, :mod:`fedhet.lab.report.stats`, :mod:`fedhet.lab.report.grouping`: run directories
  -> groups of seeds -> mean and sample std; :mod:`fedhet.lab.report.analysis`: the runs as one table.
- :mod:`fedhet.lab.report.build`: ``report.md``, ``report.json``, ``report.html``, ``report.csv`` and plots
  (:mod:`fedhet.lab.report.data`, :mod:`fedhet.lab.report.tables`, :mod:`fedhet.lab.report.markdown`,
  :mod:`fedhet.lab.report.html`, :mod:`fedhet.lab.report.export`, :mod:`fedhet.lab.report.plots`,
  :mod:`fedhet.lab.report.time_curves`, :mod:`fedhet.lab.report.client_report`).
- :mod:`fedhet.lab.report.difference`: a paired or Welch difference over seeds with its Student-t interval,
  read by ``--baseline`` (:mod:`fedhet.lab.report.baseline`, drawn by :mod:`fedhet.lab.report.forest`) and by
  the claims' verdicts (:mod:`fedhet.lab.claims.verdict`).

The ``fedhet report`` command is :mod:`fedhet.lab.commands.report`. The runs come from :mod:`fedhet.lab.sweep`
(or single ``fedhet run`` calls); the claims' report builds on this one (:mod:`fedhet.lab.claims`).
"""
