"""The papers' claims as data, run as one resumable sweep per tier and judged by a stated rule (``fedhet claims``).

- :mod:`~fedhet.lab.claims.definitions`: protocols (shared sweeps, their tiers and regime) and
  claims (comparisons with their minimal effect and role, the paper's quantifier), read from
  ``configs/claims/``;
- :mod:`~fedhet.lab.claims.planning`: every run the claims need in a tier, each planned once; which
  runs are below their protocol's regime; which sides pair by seed;
- :mod:`~fedhet.lab.claims.verdict`: the verdict rule (paired or Welch 95% Student-t interval;
  holds / smaller than claimed / not reproduced / contradicted / inconclusive; ``all`` and ``most``);
- :mod:`~fedhet.lab.claims.evaluate`: per-seed metric values from the run directories, each
  comparison's outcome and each claim's verdict, or "not tested" below the regime;
- :mod:`~fedhet.lab.claims.render`, :mod:`~fedhet.lab.claims.figures` and
  :mod:`~fedhet.lab.claims.report`: the claims table (terminal, Markdown, JSON), the forest plots
  and small-multiple curves, and the HTML report.

The ``fedhet claims`` command and its sub-actions are :mod:`fedhet.lab.commands.claims`.

The rule, in short: a comparison's difference ``method - baseline`` over seeds gets a 95% interval
``[lo, hi]`` oriented so that positive is the paper's side; with ``delta`` its pre-set minimal effect it
**holds** if ``lo > 0 and hi >= delta``, is **smaller than claimed** if ``lo > 0 and hi < delta``, **not
reproduced** if ``lo <= 0 <= hi < delta``, **contradicted** if ``hi < 0`` and **inconclusive** if
``lo <= 0 and hi >= delta``: five regions, each interval in one. A claim's counted primary comparisons decide
it under the paper's quantifier (an ``all`` claim is contradicted only at the Bonferroni-adjusted level), and
only at or above its protocols' regime. ``docs/claims.md`` states it in full.
"""
