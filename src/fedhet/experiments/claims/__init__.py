"""The papers' claims as data, run as one resumable sweep and judged by a stated rule (``fedhet claims``).

- :mod:`~fedhet.experiments.claims.definitions`: protocols (shared sweeps) and claims (comparisons), read
  from ``configs/claims/``;
- :mod:`~fedhet.experiments.claims.planning`: every run the claims need, each planned once;
- :mod:`~fedhet.experiments.claims.verdict`: the verdict rule (paired differences over seeds, a 95%
  Student-t interval; holds / not reproduced / inconclusive);
- :mod:`~fedhet.experiments.claims.evaluate`: per-seed metric values from the run directories and the
  verdict of each comparison and claim;
- :mod:`~fedhet.experiments.claims.render` / :mod:`~fedhet.experiments.claims.report`: the claims table
  (terminal, Markdown, JSON) and the HTML report with each claim's curves.

The rule, in short: for each comparison the per-seed difference ``method - baseline`` (same seed) gives a
mean and a two-sided 95% Student-t interval. ``greater`` holds when the interval's lower end is above 0
and is not reproduced when the mean is <= 0; ``less`` mirrors it; ``not_worse`` uses ``-margin`` in
place of 0; anything else, and fewer than two seeds, is inconclusive. A claim holds when all its
comparisons hold and is not reproduced when any is. ``docs/claims.md`` states it in full.
"""
