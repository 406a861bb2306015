#!/usr/bin/env bash
# fedhet's main job: the papers' headline claims, each in its paper's regime, each with a verdict.
#
# Six claims (configs/claims/*.toml; docs/claims.md): FedAWARE beats most baselines under Dirichlet label
# skew; AWARE enlarges the e-LUDD of all four methods, and improves the accuracy of most; FedAWARE beats FedAvg
# under Statistical Only, Hybrid and Hybrid+ heterogeneity and every method degrades towards Hybrid+; FedSpeed
# beats FedAvg, FedProx, SCAFFOLD and FedDyn at Dir(0.6) with 10% participation and reaches the late 85%
# target first; FedAU beats average-participating and average-all under most heterogeneous participation
# patterns. Each comparison's minimal effect, role and quantifier were fixed before any evaluation run.
# Runs the default tier (the protocols at their regime: the papers' local work at the horizon where the effect
# is claimed), one job per core, then the claims table (differences with 95% intervals, the outcomes, the
# verdicts) and an HTML report in runs/claims/report/ (claims summary, forest plots, curves per setting).
#
#   bash scripts/claims.sh                  default tier: 295 runs, about 4 h 40 min on a 2-core machine (scaled
#                                           from its 41 runs of seed 1, 49 min from a fresh clone on 2026-11-28;
#                                           docs/claims.md "Cost"; the script prints its wall time at the end),
#                                           progress + ETA.
#                                           Step sizes: the pre-registered tuning's (scripts/tune_claims.sh,
#                                           docs/claims_tuning.md) or the paper's own (FedSpeed)
#   bash scripts/claims.sh --tier quick     minutes: below every regime, trends only, no verdict
#   bash scripts/claims.sh --tier full      the papers' lengths (--full is the same): days on a CPU
#   bash scripts/claims.sh --only fedau-participation     one claim (ids: .venv/bin/fedhet claims list)
#
# Faster without changing a result: more cores (--jobs N); a CUDA GPU is used without a flag (run.device =
# "auto"); on a Ray cluster: --executor ray --ray-address auto [--ray-gpus-per-run 1] (docs/experiments.md,
# "Sweeps on a Ray cluster"). Or write every run's config.toml and run them anywhere:
#   .venv/bin/fedhet claims export --out DIR   (then `fedhet claims report --out DIR` judges them)
# Interrupted? Run the same command again: finished runs are kept, interrupted ones resume from their
# checkpoints. Other arguments go to `fedhet claims run` (--jobs N, --out DIR, --dry-run).
# The short 40-round comparison of eleven algorithms is scripts/compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
bash scripts/setup.sh
status=0
.venv/bin/fedhet claims run "$@" || status=$?
echo "fedhet claims: finished after $(( $(date +%s) - started )) s (set-up included)"
exit "$status"
