"""Sweeps: one experiment file over grids of settings and seeds, each run resumable (``fedhet sweep``).

- :mod:`fedhet.lab.sweep.grid`: ``--grid key=v1,v2``, ``--seeds``, variants files, run names.
- :mod:`fedhet.lab.sweep.plan`: a sweep's runs as resolved configurations, and each run's state on disk
  (new, to resume, finished).
- :mod:`fedhet.lab.sweep.options`: how a sweep executes (the ``[sweep]`` table and its command-line flags,
  which :mod:`fedhet.lab.commands.executor_flags` adds to ``fedhet sweep`` and ``fedhet claims run``).
- :mod:`fedhet.lab.sweep.execute`: runs the plan, in this process or on local worker processes
  (:mod:`fedhet.lab.sweep.worker`, :mod:`fedhet.lab.sweep.worker_pool`, :mod:`fedhet.lab.sweep.lifetime`) or on
  a Ray cluster (:mod:`fedhet.lab.sweep.ray_executor`, :mod:`fedhet.lab.sweep.run_files`), with a progress view
  (:mod:`fedhet.lab.sweep.progress`); :mod:`fedhet.lab.sweep.outcome` is what became of each run.

The ``fedhet sweep`` command is :mod:`fedhet.lab.commands.sweep`. Reading the runs back is
:mod:`fedhet.lab.report`; the papers' claims run as sweeps in :mod:`fedhet.lab.claims`.
"""
