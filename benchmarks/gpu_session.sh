#!/usr/bin/env bash
# One call on a lent CUDA machine (issue 22, item 5), in at most 8 minutes: the GPU parity tests, a
# determinism check, the cohort gradient's step (benchmarks/bench_cohort_grad.py), the claims default tier with run.backend = "auto" (time-capped; benchmarks/claims_gpu.py)
# the same tier in lockstep (issue 36: claims_gpu.py --lockstep on) and the lockstep benchmark on CUDA
# (bench_lockstep.py), and pfl-research's CIFAR-10 configuration (benchmarks/bench_pfl_cifar.py). Results go to $OUT (or
# benchmarks/results). Fashion-MNIST comes from .gpu_data/fashion-mnist (copied there by hand; the machine
# reaches no network) when /usr/share/datasets has none. Usage: bash benchmarks/gpu_session.sh [claims cap s] [pfl cap s] [lockstep cap s]
# Every step's timeout is also cut to what is left of GPU_SESSION_BUDGET seconds (default 470), so that one
# device call of 8 minutes ends with every step's figures written, the later ones shortened rather than lost.
set -u
budget="${GPU_SESSION_BUDGET:-470}"
deadline=$((SECONDS + budget))
# cap N: N seconds, or what is left before the deadline (at least 5), whichever is less.
cap() { local left=$((deadline - SECONDS)); [ "$left" -lt 5 ] && left=5; [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
claims_cap="${1:-90}"
pfl_cap="${2:-40}"
lockstep_cap="${3:-120}"
py="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
mkdir -p "$out"
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -d .gpu_data/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && cp -r .gpu_data/fashion-mnist /usr/share/datasets/
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv 2>&1; nproc
  "$py" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(0))"
} 2>&1 | tee "$out/machine.txt"

echo "== parity: CPU vs GPU sequential and vectorized, float64, every local solver"
timeout "$(cap 120)" "$py" -m pytest -q -p no:cacheprovider tests/backends/test_backends_cuda.py 2>&1 | tail -25 | tee "$out/parity.txt"

echo "== determinism: the same GPU run twice (vectorized), metrics compared bitwise"
timeout "$(cap 120)" "$py" - <<'EOF' 2>&1 | tail -8 | tee -a "$out/parity.txt"
import json, tempfile, time
from pathlib import Path
from fedhet.config.schema import load_config
from fedhet.engine.runner import run_experiment
records = []
for attempt in range(2):
    with tempfile.TemporaryDirectory() as out:
        config = load_config("configs/claims/base/fmnist_dir01_uniform.toml",
                             ["run.rounds=5", "run.backend=auto", "run.progress=false", f"run.out_dir={out}",
                              "server.name=fedaware", "run.name=det"])
        started = time.perf_counter()
        summary = run_experiment(config, log=lambda line: None)
        lines = [json.loads(l) for l in next(Path(out).rglob("metrics.jsonl")).read_text().splitlines()]
        records.append([{k: v for k, v in r.items() if k != "wall_seconds"} for r in lines])
        print(f"attempt {attempt}: {summary.get('backend')} on {summary.get('device')}, "
              f"{time.perf_counter() - started:.1f} s, accuracy {summary.get('final_accuracy')}")
print("deterministic:", records[0] == records[1])
EOF

echo "== one local step of ten clients: vmap against batched products against the per-client loop"
timeout "$(cap 60)" "$py" benchmarks/bench_cohort_grad.py --device cuda --repeats 5 --steps 50 --out "$out" 2>&1 | tail -6

claims_cap=$(cap "$claims_cap")
echo "== claims default tier on the GPU (cap ${claims_cap} s)"
timeout $((claims_cap + 60)) "$py" benchmarks/claims_gpu.py --backend auto --max-seconds "$claims_cap" --report \
  --groups "fedaware-dirichlet,aware-eludd,fedaware-hybrid,aware-accuracy:8;fedspeed-dir06:4;fedau-participation:4" \
  --runs-dir /tmp/claims-gpu --out "$out" 2>&1 | tail -22
tar -czf "$out/claims-gpu-runs.tar.gz" -C /tmp/claims-gpu --exclude='*.pt' --exclude='*.png' --exclude='*.svg' \
  --exclude='checkpoint*' . 2>/dev/null || true

lockstep_cap=$(cap "$lockstep_cap")
echo "== claims default tier in lockstep on the GPU (cap ${lockstep_cap} s; one process, the runs grouped)"
timeout $((lockstep_cap + 60)) "$py" benchmarks/claims_gpu.py --backend auto --lockstep on --jobs 1 \
  --max-seconds "$lockstep_cap" --runs-dir /tmp/claims-gpu-lockstep --out "$out" 2>&1 | tail -12

echo "== lockstep against solo on CUDA: operators and host seconds per run-round"
timeout "$(cap 75)" "$py" benchmarks/bench_lockstep.py --quick --device cuda --runs 1,8,64 --out "$out" 2>&1 | tail -12

pfl_cap=$(cap "$pfl_cap")
echo "== pfl-research CIFAR-10 configuration (cap ${pfl_cap} s a variant)"
timeout $((2 * pfl_cap + 30)) "$py" benchmarks/bench_pfl_cifar.py --max-seconds "$pfl_cap" \
  --variants vectorized,sequential --out "$out" 2>&1 | tail -8
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv 2>&1 | tail -1
date -u
