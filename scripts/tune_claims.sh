#!/usr/bin/env bash
# Tunes the local learning rate (client.learning_rate) of the FedAWARE-family claims' methods
# (configs/claims/protocols.toml: fedaware_dir01, fedaware_shards, fedaware_hybrid_plus) with `fedhet tune`.
# For reproducibility (docs/claims.md, "Learning rates"); not part of CI.
#
# The tuning protocol, fixed before any tuning ran:
#   parameter   client.learning_rate, grid 0.01, 0.02, 0.05, 0.1, 0.2
#   criterion   train_loss@60: the training loss at the protocol's last round (the FedAU paper's criterion;
#               with run.eval_every = 2 it is the mean local minibatch loss of rounds 59 and 60). It never
#               reads the test set.
#   seed        one tuning seed, run.seed = 0, disjoint from the claims' evaluation seeds 1, 2 and 3
#   settings    each method's own CPU-scale protocol settings: the protocol's base file, the protocol's `set`
#               values (none for these three protocols) and the method's keys, applied with --set
#               (never --full's values)
# Each method's chosen value goes into its own table of protocols.toml with lr_source "tuned: ...".
#
#   bash scripts/tune_claims.sh [--jobs N]      runs/tune/<protocol>/<method>; rerunning resumes
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
JOBS=(--jobs 2)
[ $# -gt 0 ] && JOBS=("$@")
GRID="client.learning_rate=0.01,0.02,0.05,0.1,0.2"

tune() {  # tune PROTOCOL BASE METHOD [--set KEY=VALUE ...]
    local protocol=$1 base=$2 method=$3
    shift 3
    echo "== $(date -u +%H:%M:%S) tune $protocol/$method"
    "$PY" -m fedhet.cli tune "configs/claims/base/$base" --param "$GRID" --criterion train_loss@60 \
        --set run.seed=0 "$@" "${JOBS[@]}" --out "runs/tune/$protocol/$method"
}

D=fmnist_dir01_uniform.toml
YOGI=(--set server.name=fedyogi --set server.learning_rate=0.01 --set server.beta1=0.9 --set server.beta2=0.99
      --set server.tau=1e-4)
AWARE=(--set server.aware=true --set server.aware_alpha=0.5)
tune fedaware_dir01 $D fedavg        --set server.name=fedavg
tune fedaware_dir01 $D fedaware      --set server.name=fedaware --set server.alpha=0.5
tune fedaware_dir01 $D fedavgm       --set server.name=fedavgm --set server.momentum=0.9
tune fedaware_dir01 $D fedprox       --set client.name=fedprox --set client.mu=0.01
tune fedaware_dir01 $D fedyogi       "${YOGI[@]}"
tune fedaware_dir01 $D fedavg_aware  --set server.name=fedavg "${AWARE[@]}"
tune fedaware_dir01 $D fedavgm_aware --set server.name=fedavgm --set server.momentum=0.9 "${AWARE[@]}"
tune fedaware_dir01 $D fedprox_aware --set client.name=fedprox --set client.mu=0.01 "${AWARE[@]}"
tune fedaware_dir01 $D fedyogi_aware "${YOGI[@]}" "${AWARE[@]}"

S=fmnist_shards_uniform.toml
tune fedaware_shards $S fedavg   --set server.name=fedavg
tune fedaware_shards $S fedaware --set server.name=fedaware --set server.alpha=0.5

H=fmnist_dir01_hybrid_plus.toml
tune fedaware_hybrid_plus $H fedavg   --set server.name=fedavg
tune fedaware_hybrid_plus $H fedaware --set server.name=fedaware --set server.alpha=0.5
