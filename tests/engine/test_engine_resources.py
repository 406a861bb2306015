"""Issue 12, finding 12: memory and disk estimated before a run (Gram matrix, stores, participation
log), refused or warned about by the documented rule."""
import pytest
import torch

import fedhet.components  # noqa: F401  (registers every component)
from fedhet.algorithms import build
from fedhet.config.schema import load_config
from fedhet.engine.resources import (
    Need,
    ResourceLimitError,
    available_memory,
    check_resources,
    estimate_needs,
    measure_server_state,
    resource_problems,
)
from fedhet.engine.runner import run_experiment


def _components(server, client="sgd"):
    config = load_config(None, {"server.name": server, "client.name": client})
    solver, method = build(config)
    return method, solver


def test_fedaware_gram_matrix_is_measured_without_allocating_it():
    server, solver = _components("fedaware")
    n, d = 30_000, 31_000
    stores, tensors = measure_server_state(server, num_clients=n, dim=d, dtype=torch.float32)
    assert [(s.name, s.dim) for s in stores] == [("fedaware_momentum", d)]
    gram = [size for what, size in tensors.items() if "gram' [30000 x 30000] float64" in what]
    assert gram == [8 * n * n] == [7_200_000_000]          # N^2 float64: 7.2 GB at N = 30,000


def test_stores_and_participation_log_sizes():
    server, solver = _components("scaffold", "scaffold")
    stores, tensors = measure_server_state(server, num_clients=100, dim=50, dtype=torch.float32)
    needs = estimate_needs(num_clients=100, dim=50, rounds=10**7, compute_dtype=torch.float32,
                           store_dtype="bfloat16", store_mmap=False, store_device="cpu",
                           client_state_names=solver.client_state_names, server_stores=stores, server_tensors=tensors)
    by_what = {need.what.split(" [")[0]: need for need in needs}
    assert by_what["client store control_variate"].memory == 100 * 50 * 2      # bfloat16: 2 bytes
    assert by_what["participation log"].memory == 10**7 * 100                 # one byte per (round, client)
    mmap = estimate_needs(num_clients=100, dim=50, rounds=1, compute_dtype=torch.float32, store_dtype="float32",
                          store_mmap=True, store_device="cpu", client_state_names=("c",))
    assert mmap[0].memory == 0 and mmap[0].disk == 3 * 100 * 50 * 4          # table and two snapshots


def test_rule_refuses_above_available_and_warns_above_half():
    needs = [Need("a", memory=600, disk=10)]
    assert resource_problems(needs, memory_available=1000, disk_available=10**6) == ([], [
        "memory: needs about 600 B (a 600 B), 1.0 KB of available memory"])
    errors, warnings = resource_problems(needs, memory_available=500, disk_available=15)
    assert len(errors) == 1 and errors[0].startswith("memory: needs about 600 B") and warnings[0].startswith("disk")
    assert resource_problems(needs, memory_available=None, disk_available=None) == ([], [])


def test_check_reads_meminfo_and_refuses_or_warns(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000 kB\nMemAvailable:    1000 kB\n")
    assert available_memory(meminfo) == 1000 * 1024
    needs = [Need("server state 'gram' [500 x 500] float64", memory=8 * 500 * 500)]
    with pytest.raises(ResourceLimitError, match=r"'gram' \[500 x 500\] float64 2\.0 MB.*1\.0 MB of available memory"):
        check_resources(needs, mode="error", run_dir=tmp_path, store_device="cpu", log=print, meminfo=meminfo)
    logged = []
    check_resources(needs, mode="warn", run_dir=tmp_path, store_device="cpu", log=logged.append, meminfo=meminfo)
    assert len(logged) == 1 and logged[0].startswith("warning: this run needs more than the machine has")
    check_resources(needs, mode="off", run_dir=tmp_path, store_device="cpu", log=logged.append, meminfo=meminfo)
    assert len(logged) == 1


def test_a_participation_log_larger_than_memory_is_refused_before_the_run(small_config, tmp_path):
    # 10^12 rounds x 12 clients: 12 TB of participation log; refused before anything is allocated.
    with pytest.raises(ResourceLimitError, match=r"participation log \[1000000000000 x 12\] 12\.0 TB"):
        run_experiment(small_config("run.name=huge", f"run.rounds={10**12}"))
    assert not (tmp_path / "huge" / "checkpoint.pt").exists()
