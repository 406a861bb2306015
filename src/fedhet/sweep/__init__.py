"""Sweeps: one experiment file over grids of settings and seeds, each run resumable (``fedhet sweep``).

- :mod:`fedhet.sweep.grid`: ``--grid key=v1,v2``, ``--seeds``, variants files, run names.
- :mod:`fedhet.sweep.plan`: a sweep's runs as resolved configurations, and each run's state on disk
  (new, to resume, finished).
- :mod:`fedhet.sweep.options`: how a sweep executes (the ``[sweep]`` table and its command-line flags;
  :mod:`fedhet.sweep.executor_flags` adds the executor flags that ``fedhet claims run`` shares).
- :mod:`fedhet.sweep.execute`: runs the plan, in this process or on local worker processes
  (:mod:`fedhet.sweep.worker`, :mod:`fedhet.sweep.worker_pool`, :mod:`fedhet.sweep.lifetime`) or on
  a Ray cluster (:mod:`fedhet.sweep.ray_executor`, :mod:`fedhet.sweep.run_files`), with a progress view
  (:mod:`fedhet.sweep.progress`); :mod:`fedhet.sweep.outcome` is what became of each run.
- :mod:`fedhet.sweep.commands`: the ``fedhet sweep`` command and the plan runner ``fedhet claims`` shares.

Reading the runs back is :mod:`fedhet.report`; the papers' claims run as sweeps in :mod:`fedhet.claims`.
"""
