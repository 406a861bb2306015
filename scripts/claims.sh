#!/usr/bin/env bash
# fedhet's main job: the papers' headline claims, reproduced at CPU scale, each with a verdict.
#
# Five claims (configs/claims/*.toml; docs/claims.md): FedAWARE beats FedAvg and the other baselines under
# Dirichlet label skew; AWARE raises the e-LUDD of FedAvg, FedAvgM, FedProx and FedYogi without losing
# accuracy; FedAWARE's gain holds under Statistical Only, Hybrid and Hybrid+ heterogeneity and every method
# degrades towards Hybrid+; FedSpeed beats FedAvg, FedProx, SCAFFOLD and FedDyn at Dir(0.6) with 10%
# participation and reaches a target in fewer rounds; FedAU beats average-participating and average-all under
# Bernoulli, Markov and cyclic participation and is close to the oracle, FedVarp and MIFA.
# 108 runs (Fashion-MNIST, FedAvg MLP, 3 seeds each; runs shared between claims), one job per core, then the
# claims table (both sides' mean ± std, the paired difference with its 95% interval, the verdict, where the
# learning rates come from) and an HTML report with each claim's curves in runs/claims/report/.
#
#   bash scripts/claims.sh             CPU scale: 14 minutes on a fresh 2-core machine, set-up included (docs/claims.md)
#   bash scripts/claims.sh --full      the papers' lengths (rounds, local epochs, clients, seeds): days on a CPU
#   bash scripts/claims.sh --only fedau-participation     one claim (ids: .venv/bin/fedhet claims list)
#
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
