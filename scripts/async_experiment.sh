#!/usr/bin/env bash
# Asynchronous FL against synchronous rounds on the same devices and availability (docs/async.md, "The experiment").
#
# Fashion-MNIST, label-Dirichlet(0.3) over 100 clients, the 2x200 MLP, 3 local epochs of batch 64 at 0.01,
# lognormal devices (src/fedhet/configs/fmnist_deadline_time.toml's), and a synthetic availability trace (each
# client on for 600 s and off for 1200 s on average, its mean on-period spread by sigma 1 across clients):
#   synchronous:  FedAvg, FedAWARE, FedAU waiting for the slowest of 10 available clients; FedAvg with a 12 s
#                 deadline and partial work                     (configs/async/sync.variants.toml)
#   asynchronous: FedBuff (K = 10, s(tau) = (1 + tau)^(-1/2)) with 20 and 50 clients in flight, FedAsync
#                 (alpha 0.6, the same s), FedAWARE and FedAU in buffered form  (configs/async/async.variants.toml)
# 5 seeds each, then `fedhet report` with FedAvg as the baseline: time to 70% and final accuracy with intervals,
# accuracy against virtual seconds for every arm in one panel.
#
#   bash scripts/async_experiment.sh              45 runs, about an hour on 2 cores; report in runs/async_time/report
#   bash scripts/async_experiment.sh --jobs 1     other arguments go to both `fedhet sweep`s
#
# Finished runs are kept: running it again only runs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

out="runs/async_time"
seeds="1,2,3,4,5"
started=$(date +%s)
bash scripts/setup.sh
fedhet=".venv/bin/fedhet"

mkdir -p "$out"
trace="$out/availability.json"
[ -f "$trace" ] || "$fedhet" traces generate --clients 100 --out "$trace" --seed 1 --horizon 7200 \
  --mean-on 600 --mean-off 1200 --spread 1.0
with_trace=(--set participation.name=trace --set "participation.trace_file=$(pwd)/$trace")

sweep_status=0
"$fedhet" sweep src/fedhet/configs/fmnist_deadline_time.toml --variants configs/async/sync.variants.toml \
  --seeds "$seeds" --out "$out/sync" "${with_trace[@]}" --set participation.clients_per_round=10 "$@" \
  || sweep_status=$?
if [ "$sweep_status" -ne 0 ] && [ "$sweep_status" -ne 1 ]; then exit "$sweep_status"; fi
"$fedhet" sweep src/fedhet/configs/fmnist_async_time.toml --variants configs/async/async.variants.toml \
  --seeds "$seeds" --out "$out/async" "${with_trace[@]}" "$@" || sweep_status=$?
if [ "$sweep_status" -ne 0 ] && [ "$sweep_status" -ne 1 ]; then exit "$sweep_status"; fi
echo "sweeps finished after $(( $(date +%s) - started )) s (set-up included)"

"$fedhet" report "$out/sync" "$out/async" --out "$out/report" --target 0.7 --group-by data.name \
  --baseline sync_fedavg --title "Asynchronous FL against synchronous rounds: Fashion-MNIST, Dir(0.3), 100 clients"
exit "$sweep_status"
