"""The random-kill campaign: real ``fedhet run``, ``fedhet run --resume`` and ``fedhet sweep``
processes are SIGKILLed at random moments, resumed, and compared bit for bit with uninterrupted
runs (final model and every record but wall-clock times). docs/reliability.md lists what it covers.

Each CI run draws new kill moments; the seed is in every failure message, and
``FEDHET_KILL_SEED=<seed>`` replays a campaign.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedhet.config.schema import load_config
from fedhet.engine import checkpoint as ckpt
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.rundir_lock import LOCK_NAME, DirectoryLock, RunDirectoryInUseError
from fedhet.engine.runner import run_experiment
from fedhet.lab.sweep.plan import plan_sweep
from helpers_reliability import assert_same_run, subprocess_env
from small_run import small_toml

ROUNDS = 60
TOML = small_toml(name="campaign", rounds=ROUNDS, eval_every=1, checkpoint_every=4, progress=False)
# Memory-mapped per-client stores (SCAFFOLD's c_i): kills also land in store snapshots.
MMAP = ["client.name=scaffold", "server.name=scaffold", "run.store_mmap=true"]
KILLS = {"run+resume": 8, "run+resume, memory-mapped stores": 7, "sweep": 5}
KILLS_PER_CHAIN = 3
SEED = int(os.environ.get("FEDHET_KILL_SEED", time.time_ns() % 2**32))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedhet.cli", *args]


def _start(command: list[str], log: Path) -> subprocess.Popen:
    with open(log, "a") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=subprocess_env())


def _wait_for_lock(process: subprocess.Popen, directory: Path, timeout: float = 120) -> bool:
    """True once ``process`` holds ``directory``'s lock (it has started working there); False when
    it ended first."""
    lock = directory / LOCK_NAME
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if lock.read_text().strip() == str(process.pid):
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    process.kill()
    raise AssertionError(f"{process.args} did not start within {timeout} s (seed {SEED})")


def _records(directory: Path) -> int:
    try:
        return (directory / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _run_or_kill(process: subprocess.Popen, directory: Path, window: float, rng: random.Random,
                 rounds: int = 0) -> bool:
    """Kill ``process`` at a random moment after it took ``directory``'s lock; True when it was
    killed, False when it finished first (then it must have succeeded).

    The moment: with ``rounds``, three times in four a random round still to run is drawn, and the
    kill comes a random 0-30 ms after that round's record appears (inside a round, an evaluation, a
    checkpoint write); otherwise, a random time within ``window`` seconds (setting up, the last
    writes). Without the first kind, the short rounds of a small run would rarely be hit."""
    if not _wait_for_lock(process, directory):
        process.wait()
        return False
    done = _records(directory)
    target = rng.randint(done + 1, rounds) if rounds > done and rng.random() < 0.75 else None
    if target is None:
        try:
            process.wait(timeout=rng.uniform(0, window))
        except subprocess.TimeoutExpired:
            pass
    else:
        give_up = time.monotonic() + 10 * window + 30
        while process.poll() is None and _records(directory) < target and time.monotonic() < give_up:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.03))
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    process.wait()
    return process.returncode == -signal.SIGKILL


def _wait_until_free(directories: list[Path], timeout: float = 10) -> None:
    """The workers of a killed sweep die with it: their run directories' locks come free."""
    deadline = time.monotonic() + timeout
    for directory in directories:
        while True:
            try:
                DirectoryLock(directory).acquire().release()
                break
            except RunDirectoryInUseError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"a worker outlived its killed sweep in {directory} (seed {SEED})")
                time.sleep(0.05)


def _timed_reference(config, run_dir: Path) -> float:
    started = time.perf_counter()
    run_experiment(config, run_dir)
    return time.perf_counter() - started


def _run_chains(kind: str, sets: list[str], base: Path, out: Path, reference: Path, window: float,
                rng: random.Random) -> int:
    """Chains of run, kill, resume, kill, ... until ``KILLS[kind]`` kills; each chain's final run
    must equal the reference bitwise. Returns the kills done."""
    kills, chain = 0, 0
    out.mkdir(parents=True, exist_ok=True)
    while kills < KILLS[kind] and chain < 12:
        chain += 1
        name = f"chain{chain}"
        run_dir = out / name
        fresh = _cli("run", str(base), "--set", f"run.out_dir={out}", "--set", f"run.name={name}",
                     *[arg for item in sets for arg in ("--set", item)])
        log = out / f"{name}.log"
        chain_kills = 0
        while True:
            # A run killed before its round-0 checkpoint has nothing to resume: it is started again.
            command = _cli("run", "--resume", str(run_dir)) if ckpt.has_checkpoint(run_dir) else fresh
            process = _start(command, log)
            # At most KILLS_PER_CHAIN kills a chain: a chain killed in its last writes would otherwise
            # collect every later kill there; a new chain starts from round 0 again.
            if (kills < KILLS[kind] and chain_kills < KILLS_PER_CHAIN
                    and _run_or_kill(process, run_dir, window, rng, rounds=ROUNDS)):
                kills += 1
                chain_kills += 1
                # Where it was killed (evaluated rounds on disk), shown with -s to judge the spread.
                print(f"{kind}: kill {kills} in {name} after {len(read_metrics(run_dir / 'metrics.jsonl'))} records")
                continue
            process.wait()
            assert process.returncode == 0, f"{kind}, {name} (seed {SEED}): {log.read_text()[-2000:]}"
            break
        try:
            assert_same_run(reference, run_dir)
        except AssertionError as error:
            raise AssertionError(f"{kind}, {name} differs from the uninterrupted run (seed {SEED})") from error
    return kills


@pytest.mark.slow
def test_random_kills_of_run_resume_and_sweep_resume_bitwise(tmp_path):
    rng = random.Random(SEED)
    base = tmp_path / "campaign.toml"
    base.write_text(TOML)
    done = {}

    # run and resume, in-RAM and memory-mapped stores
    for kind, sets in (("run+resume", []), ("run+resume, memory-mapped stores", MMAP)):
        out = tmp_path / kind.replace(" ", "_").replace(",", "")
        reference = tmp_path / "reference" / kind.replace(" ", "_").replace(",", "")
        seconds = _timed_reference(load_config(base, sets), reference)
        # The moments after the lock is taken: building the data, the rounds, the last writes.
        done[kind] = _run_chains(kind, sets, base, out, reference, window=1.5 * seconds + 0.3, rng=rng)

    # sweeps of two runs in two worker processes; the sweep's own process is killed. Chains as above:
    # a resumed sweep has less left to do than the window, so it often finishes before its kill; a
    # new chain (a new out dir) then starts from nothing until the planned kills are done.
    plan = plan_sweep(base, seeds=[1, 2], out_dir=tmp_path / "sweep")
    references = {run.name: tmp_path / "reference" / run.name for run in plan.runs}
    seconds = sum(_timed_reference(run.config, references[run.name]) for run in plan.runs)
    kills, chain = 0, 0
    while kills < KILLS["sweep"] and chain < 12:
        chain += 1
        out = tmp_path / f"sweep{chain}"
        command = _cli("sweep", str(base), "--seeds", "1,2", "--out", str(out), "--jobs", "2")
        out.mkdir()
        chain_kills = 0
        while True:
            process = _start(command, tmp_path / f"sweep{chain}.log")
            if (kills < KILLS["sweep"] and chain_kills < KILLS_PER_CHAIN
                    and _run_or_kill(process, out, seconds + 2.0, rng)):
                kills += 1
                chain_kills += 1
                _wait_until_free([out / run.name for run in plan.runs])
                continue
            process.wait()
            assert process.returncode == 0, f"sweep (seed {SEED}): {(tmp_path / f'sweep{chain}.log').read_text()[-3000:]}"
            break
        for run in plan.runs:
            try:
                assert_same_run(references[run.name], out / run.name)
            except AssertionError as error:
                raise AssertionError(f"sweep run {run.name} of chain {chain} differs from the uninterrupted run "
                                     f"(seed {SEED})") from error
    done["sweep"] = kills

    assert done == KILLS, f"kills done {done}, planned {KILLS} (seed {SEED})"
    assert sum(done.values()) >= 20
