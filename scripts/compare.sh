#!/usr/bin/env bash
# fedhet's short comparison (the main job is scripts/claims.sh): eleven algorithms side by side in one setting.
#
# Fashion-MNIST, label-Dirichlet(0.1) over 100 clients, two blocks, 2 seeds each:
#   1. 10 clients per round sampled uniformly (the FedAWARE papers' setting): FedAvg, FedAvgM, FedProx,
#      SCAFFOLD, FedDyn, FedYogi, FedAWARE, FedAvg with AWARE, FedSpeed;
#   2. FedAU's heterogeneous participation (each client joins with its own, label-correlated probability):
#      FedAU against average-participating and FedAvg;
# then the tables (mean ± sample std over seeds) and a self-contained HTML report with the curves.
#
#   bash scripts/compare.sh            CPU scale (configs/cpu/compare/fmnist_compare.toml: 1 local epoch,
#                                      eta_l 0.05, 40 rounds): under 10 minutes on 2 cores
#   bash scripts/compare.sh --full     paper length (FedAWARE's FMNIST setting: 3 local epochs, eta_l 0.01,
#                                      300 rounds, 3 seeds); also FEDHET_FULL=1
#
# The algorithms are the tables of configs/cpu/compare/{algorithms,participation}.variants.toml. Other arguments go to
# `fedhet sweep` (e.g. --only fedavg,fedaware, --jobs 1, --set run.rounds=20). Finished runs are kept:
# running it again only runs what is missing (delete the runs/ directory to start over).
set -euo pipefail
cd "$(dirname "$0")/.."

full="${FEDHET_FULL:-0}"
sweep_args=()
for arg in "$@"; do
  if [ "$arg" = "--full" ]; then full=1; else sweep_args+=("$arg"); fi
done

# block name -> base config and variants file
blocks=(uniform heterogeneous)
declare -A base=([uniform]=configs/cpu/compare/fmnist_compare.toml
                 [heterogeneous]=configs/cpu/compare/fmnist_participation.toml)
declare -A variants=([uniform]=configs/cpu/compare/algorithms.variants.toml
                     [heterogeneous]=configs/cpu/compare/participation.variants.toml)
if [ "$full" = "1" ]; then
  out="runs/compare_full"
  seeds="1,2,3"
  target="0.8"
  # FedAWARE's Fashion-MNIST scripts (configs/fmnist_fedavg.toml): 3 local epochs of batch 64 at 0.01, 300 rounds.
  settings=(--set run.rounds=300 --set client.epochs=3 --set client.learning_rate=0.01)
else
  out="runs/compare"
  seeds="1,2"
  target="0.7"
  settings=()
fi

started=$(date +%s)
bash scripts/setup.sh
fedhet=".venv/bin/fedhet"

# --overwrite: runs left by an earlier setting are redone; finished runs of this setting are reused.
sweep_status=0
for block in "${blocks[@]}"; do
  "$fedhet" sweep "${base[$block]}" --variants "${variants[$block]}" --seeds "$seeds" --jobs 2 \
    --out "$out/$block" --overwrite ${settings[@]+"${settings[@]}"} ${sweep_args[@]+"${sweep_args[@]}"} \
    || sweep_status=$?
  if [ "$sweep_status" -ne 0 ] && [ "$sweep_status" -ne 1 ]; then
    exit "$sweep_status"                # a configuration error or an interruption: nothing to report
  fi
done
echo "sweep finished after $(( $(date +%s) - started )) s (set-up included)"
echo

"$fedhet" report "$out/uniform" "$out/heterogeneous" --out "$out/report" --target "$target" \
  --title "fedhet comparison: Fashion-MNIST, Dir(0.1), 100 clients"
exit "$sweep_status"
