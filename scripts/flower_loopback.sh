#!/usr/bin/env bash
# fedhet's FedAWARE in a real Flower deployment on this machine, checked against `fedhet run`.
#
# Starts a SuperLink and two SuperNodes as separate processes bound to 127.0.0.1 (free ports, insecure),
# runs configs/flower/loopback_fedaware.toml (FedAWARE, 3 rounds, synthetic data, float64) as a Flower app
# with `flwr run`, runs the same config with `fedhet run`, and prints as its last line
#     max parameter difference: <number>
# (0 when the deployment reproduces the simulation bit for bit; docs/flower.md). Every process it
# starts is stopped by its process id (its own process group) when the script exits, however it exits.
#
#   bash scripts/flower_loopback.sh                 set-up (scripts/setup.sh flower) included
#   bash scripts/flower_loopback.sh CONFIG          another fedhet config (each node hosts half the clients)
#   FEDHET_VENV=/path/to/venv bash scripts/flower_loopback.sh   use an existing venv with fedhet[flower]
#                                                   (no set-up; this checkout's src/ comes first)
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-configs/flower/loopback_fedaware.toml}"

if [ -n "${FEDHET_VENV:-}" ]; then
  venv="$FEDHET_VENV"
else
  bash scripts/setup.sh flower
  venv=".venv"
fi
bin="$(cd "$venv/bin" && pwd)"
export PATH="$bin:$PATH" PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
work="$(mktemp -d "${TMPDIR:-/tmp}/fedhet-flower-loopback.XXXXXX")"
# The Flower CLI's configuration (the SuperLink connection) lives in the work directory, not ~/.flwr.
export FLWR_HOME="$work/flwr-home"
# SuperExec polls for new app tasks every second by default; each round waits on it twice.
export FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.2

pids=()
cleanup() {
  local pid
  # Each process was started with setsid, so its id is its process group's: the group also holds the
  # SuperExec and app processes it started. Only these groups are signalled, never processes by name.
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { "$bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {  # port pid what: until something listens on the port (at most 60 s)
  local i
  for i in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "flower_loopback: $3 exited; see $work" >&2; exit 1; }
    sleep 0.2
  done
  echo "flower_loopback: $3 did not listen on 127.0.0.1:$1 within 60 s; see $work" >&2
  exit 1
}

port="$(free_port)"
mkdir -p "$FLWR_HOME"
printf '[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:%s"\ninsecure = true\n' \
  "$port" > "$FLWR_HOME/config.toml"
setsid flower-superlink --insecure --host 127.0.0.1 --port "$port" --disable-runtime-dependency-installation \
  > "$work/superlink.log" 2>&1 &
pids+=("$!")
wait_port "$port" "$!" "the SuperLink"
for i in 0 1; do
  node_port="$(free_port)"
  setsid flower-supernode --insecure --superlink "127.0.0.1:$port" --host 127.0.0.1 --port "$node_port" \
    --node-config "partition-id=$i num-partitions=2" --max-wait-time 60 > "$work/supernode-$i.log" 2>&1 &
  pids+=("$!")
  wait_port "$node_port" "$!" "SuperNode $i"
done
echo "flower_loopback: SuperLink 127.0.0.1:$port (pid ${pids[0]}), SuperNodes pids ${pids[*]:1}; logs in $work" >&2

"$bin/fedhet" flower app "$config" --out "$work/app" --result-dir "$work/result" --min-nodes 2 --round-timeout 120 >&2
timeout 600 flwr run "$work/app" loopback --stream > "$work/flwr-run.log" 2>&1 \
  || { echo "flower_loopback: flwr run failed; see $work/flwr-run.log" >&2; tail -20 "$work/flwr-run.log" >&2; exit 1; }
[ -f "$work/result/params.pt" ] \
  || { echo "flower_loopback: the ServerApp wrote no result; see $work/flwr-run.log" >&2; tail -20 "$work/flwr-run.log" >&2; exit 1; }
"$bin/fedhet" flower compare "$config" "$work/result"
