"""The Flower apps on a real loopback deployment: a SuperLink and SuperNodes as separate processes on
127.0.0.1 (free ports, insecure), the app submitted with ``flwr run`` (docs/flower.md). Slow: every round
starts a ClientApp process per SuperNode (torch import included) and SuperNodes poll every 3 s.
Every process is stopped by its id (process group) in a ``finally``, whatever the test's outcome.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("flwr")

from fedhet.flower import build  # noqa: E402
from fedhet.flower.deploy import start_loopback  # noqa: E402
from fedhet.flower.settings import AppSettings, write_app  # noqa: E402
from flower_cases import METHODS, ROOT, fedhet_run_params, simulate_with_arrivals, small_config  # noqa: E402

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def _stop_printed_process_groups(stderr: str | bytes | None) -> None:
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    for line in text.splitlines():
        if line.startswith("flower_loopback: SuperLink") and "(pid" in line:
            for pid in re.findall(r"\d+", line.split("(pid")[1].split("logs in")[0]):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pid), signal.SIGTERM)


def test_loopback_script_reproduces_fedhet_run(tmp_path):
    """scripts/flower_loopback.sh: FedAWARE on a SuperLink and two SuperNodes; its last line is the largest
    parameter difference against `fedhet run` (float64: 0 here, at most 1e-9 allowed)."""
    env = _env()
    env["FEDHET_VENV"] = str(Path(sys.executable).parent.parent)    # this interpreter's venv: no set-up
    env["TMPDIR"] = str(tmp_path)
    try:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "flower_loopback.sh")], capture_output=True, text=True,
                              env=env, timeout=300, cwd=ROOT)
    except subprocess.TimeoutExpired as timeout:
        # The script was killed before its trap could run: stop the SuperLink and SuperNodes it started
        # (each the leader of its own process group) by the ids it printed.
        _stop_printed_process_groups(timeout.stderr)
        raise
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("max parameter difference: "), done.stdout
    assert float(last.split(": ")[1]) <= 1e-9
    # The trap stopped the SuperLink and SuperNodes, whose ids the script printed.
    line = next(text for text in done.stderr.splitlines() if text.startswith("flower_loopback: SuperLink"))
    pids = [int(pid) for pid in re.findall(r"\d+", line.split("(pid")[1].split("logs in")[0])]
    assert len(pids) == 3
    time.sleep(1)
    assert [pid for pid in pids if _running(pid)] == []


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its parent's wait is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_killed_supernode_mid_run_the_run_completes(tmp_path):
    """SIGKILL one of two SuperNodes (by its process id) after round 1: the ServerApp counts its clients
    as not participating (no reply within round-timeout, or an error reply from the SuperLink) and finishes
    every round; the model is the simulation's in which exactly the arrived clients trained.

    SCAFFOLD with full participation: the surviving node's clients train every round with their c_i read
    back from its Context.state (a real SuperNode keeps it between ClientApp processes; without it the
    model would differ), and the dead node's clients are sampled in every round after its death."""
    config = small_config(["algorithm=scaffold", "participation.name=full"], rounds=3)
    result_dir = tmp_path / "result"
    settings = AppSettings(config_text=build.config_text(config), min_nodes=2, round_timeout=30.0,
                           result_dir=str(result_dir))
    app_dir = write_app(tmp_path / "app", settings)
    nodes = ["partition-id=0 num-partitions=2", "partition-id=1 num-partitions=2"]
    with start_loopback(tmp_path / "flower", nodes, env=_env()) as federation:
        run = federation.start_app(app_dir)
        deadline = time.monotonic() + 180
        metrics = result_dir / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert time.monotonic() < deadline, (tmp_path / "flower" / "flwr-run.log").read_text()[-3000:]
            assert run.poll() is None, (tmp_path / "flower" / "flwr-run.log").read_text()[-3000:]
            time.sleep(0.2)
        federation.kill_supernode(1)
        federation.wait_app(run, timeout=240)
    summary = json.loads((result_dir / "summary.json").read_text())
    assert summary["rounds"] == 3
    participation = torch.load(result_dir / "participation.pt", weights_only=True)
    failures = summary["failures"]
    # The killed node cannot answer the last round. A loaded machine can also make a live node miss a
    # round by the timeout (it trains again after), so the killed node is one that failed the last round.
    dead = {f["node"] for f in failures if f["round"] == summary["rounds"]}
    assert dead, f"no node failed the last round: no failure to test ({failures})"

    def stayed_dead(node: Any) -> bool:
        """From its first failure after the kill (which followed round 1), its clients never trained again."""
        first = min(f["round"] for f in failures if f["node"] == node and f["round"] >= 2)
        return not bool(participation[first - 1:, summary["hosts"][str(node)]].any())

    assert any(stayed_dead(node) for node in dead), (failures, participation)
    params, _ = simulate_with_arrivals(config, participation)
    assert torch.equal(params, torch.load(result_dir / "params.pt", weights_only=True))


def test_fedavg_fedau_and_fedspeed_on_one_real_federation_equal_fedhet_run(tmp_path):
    """The three methods the tests above do not deploy (FedAWARE: the loopback script; SCAFFOLD: the
    killed-node test), each submitted with ``flwr run`` in turn to ONE SuperLink with two SuperNodes:
    every final model equals ``fedhet run``'s bit for bit (float64). FedAU runs under Bernoulli
    participation, so its interval statistics see real absences."""
    nodes = ["partition-id=0 num-partitions=2", "partition-id=1 num-partitions=2"]
    with start_loopback(tmp_path / "flower", nodes, env=_env()) as federation:
        for method in ("fedavg", "fedau", "fedspeed"):
            config = small_config(METHODS[method], rounds=2)
            result_dir = tmp_path / f"result-{method}"
            settings = AppSettings(config_text=build.config_text(config), min_nodes=2, round_timeout=60.0,
                                   result_dir=str(result_dir))
            federation.run_app(write_app(tmp_path / f"app-{method}", settings), timeout=240)
            deployed = torch.load(result_dir / "params.pt", weights_only=True)
            assert not json.loads((result_dir / "summary.json").read_text())["failures"], method
            assert torch.equal(deployed, fedhet_run_params(config, tmp_path / f"run-{method}")), method


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_sigterm_to_loopback_stops_the_whole_federation(tmp_path):
    """Campaign 2026-11-24 finding P1: SIGTERM to `fedhet flower loopback` left the SuperLink, the
    SuperNodes and their apps running. Each printed PID leads its own process group."""
    command = [sys.executable, "-m", "fedhet.cli", "flower", "loopback", str(ROOT / "configs/flower/loopback_fedaware.toml"),
               "--workdir", str(tmp_path / "w"), "--timeout", "120"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                               start_new_session=True)
    pids: list[int] = []
    try:
        line = process.stdout.readline()             # "SuperLink on ... (pid P); SuperNodes pids A, B; logs in ..."
        assert line.startswith("SuperLink on"), (line, process.stderr.read() if process.poll() is not None else "")
        pids = [int(p) for p in re.findall(r"\d+", line.split("(pid", 1)[1].split("; logs", 1)[0])]
        assert len(pids) == 3 and all(_group_alive(p) for p in pids)
        time.sleep(2)                                # flwr run has started submitting the app
        process.send_signal(15)
        assert process.wait(timeout=60) != 0
        deadline = time.monotonic() + 30
        while any(_group_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [p for p in pids if _group_alive(p)]
    finally:
        for pgid in [process.pid, *pids]:            # whatever happened: our own groups, by id
            try:
                os.killpg(pgid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        process.wait(timeout=30)
