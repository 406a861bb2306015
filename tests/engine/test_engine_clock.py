"""The virtual clock in runs: today's runs unchanged, durations by hand, every backend the same
clock, kill and resume bitwise, trace participation replayed, config errors in one line."""
import json
import math

import pytest
import torch

from fedhet.backends.processes import ProcessPoolBackend, fork_available
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend
from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.engine.clock import CLOCK_RECORD_KEYS
from fedhet.engine.runner import build_federation, resume_run, run_experiment
from fedhet.system.profiles import ClientProfiles, write_profiles
from small_run import SMALL, StopAfter

THREE = ["data.name=synthetic", "data.num_devices=3", "data.max_device_size=60", "partition.name=natural",
         "partition.num_clients=3", "model.name=logreg", "participation.name=full", "client.learning_rate=0.05",
         "client.batch_size=8", "client.epochs=2", "run.rounds=3", "run.progress=false"]


def metrics(run_dir):
    return read_metrics(run_dir / "metrics.jsonl")


def strip(record):
    return {k: v for k, v in record.items() if k not in CLOCK_RECORD_KEYS and k != "wall_seconds"}


@pytest.mark.parametrize("system", [["system.policy=sync"], ["system.policy=deadline", "system.deadline=inf",
                                                               "system.partial_work=true"]])
def test_sync_and_an_infinite_deadline_leave_the_run_bitwise_unchanged(tmp_path, system):
    plain = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=plain", "server.name=fedaware"])
    timed = load_config(None, [*SMALL, f"run.out_dir={tmp_path}", "run.name=timed", "server.name=fedaware", *system])
    run_experiment(plain)
    run_experiment(timed)
    before, after = metrics(tmp_path / "plain"), metrics(tmp_path / "timed")
    assert [strip(r) for r in before] == [strip(r) for r in after]
    assert all(set(CLOCK_RECORD_KEYS) <= set(r) for r in after) and not any("virtual_seconds" in r for r in before)
    assert all(r["clients_dropped"] == 0 and r["clients_cut_short"] == 0 for r in after)
    x_plain = load_checkpoint(tmp_path / "plain")["simulator"]["params"]
    x_timed = load_checkpoint(tmp_path / "timed")["simulator"]["params"]
    assert torch.equal(x_plain, x_timed)


def three_client_profiles(tmp_path):
    profiles = ClientProfiles(device_flops=torch.full((3,), math.nan, dtype=torch.float64),
                              seconds_per_sample=torch.tensor([0.001, 0.004, 0.02], dtype=torch.float64),
                              uplink_bps=torch.tensor([1e5, 2e4, 5e4], dtype=torch.float64),
                              downlink_bps=torch.tensor([1e6, 1e5, 2e5], dtype=torch.float64),
                              latency=torch.tensor([0.01, 0.1, 0.0], dtype=torch.float64))
    path = tmp_path / "profiles.json"
    write_profiles(profiles, path)
    return profiles, path


def hand_times(task, profiles, *, up_vectors=1, down_vectors=1, epochs=2, batch=8):
    """T_n by hand: 2 L + 8 S_down / v + 8 S_up / u + c * (epochs * n_n) (every batch of an epoch
    sees the client's examples once)."""
    d = task.spec.dim
    times = []
    for n in range(3):
        size = int(task.client_sizes[n])
        times.append(2 * float(profiles.latency[n]) + 8 * 4 * d * down_vectors / float(profiles.downlink_bps[n])
                     + 8 * 4 * d * up_vectors / float(profiles.uplink_bps[n])
                     + float(profiles.seconds_per_sample[n]) * epochs * size)
    return times


def test_round_durations_of_a_three_client_federation_by_hand(tmp_path):
    profiles, path = three_client_profiles(tmp_path)
    base = [*THREE, f"run.out_dir={tmp_path}", "system.profiles=file", f"system.profile_file={path}"]
    config = load_config(None, [*base, "run.name=sync", "system.policy=sync"])
    run_experiment(config)
    task = build_federation(config, torch.device("cpu")).task
    times = hand_times(task, profiles)
    records = metrics(tmp_path / "sync")
    assert [r["round_seconds"] for r in records] == pytest.approx([max(times)] * 3, rel=1e-12)
    assert records[-1]["virtual_seconds"] == pytest.approx(3 * max(times), rel=1e-12)
    assert records[0]["bytes_down"] == records[0]["bytes_up"] == 3 * 4 * task.spec.dim

    # A deadline between the second-slowest and the slowest drops the slowest client.
    order = sorted(range(3), key=lambda n: times[n])
    deadline = (times[order[1]] + times[order[2]]) / 2
    run_experiment(load_config(None, [*base, "run.name=deadline", "system.policy=deadline",
                                      f"system.deadline={deadline!r}"]))
    records = metrics(tmp_path / "deadline")
    assert [r["round_seconds"] for r in records] == [deadline] * 3
    assert [r["num_participants"] for r in records] == [2] * 3 and records[0]["clients_dropped"] == 1
    assert records[0]["bytes_up"] == 2 * 4 * task.spec.dim and records[0]["bytes_down"] == 3 * 4 * task.spec.dim

    # Overcommit with k = 2 of 3: keeps the two fastest, lasts the second-fastest's time.
    run_experiment(load_config(None, [*base, "run.name=over", "participation.name=uniform",
                                      "participation.clients_per_round=2", "system.policy=overcommit",
                                      "system.overcommit=1.5"]))
    records = metrics(tmp_path / "over")
    assert [r["round_seconds"] for r in records] == pytest.approx([times[order[1]]] * 3, rel=1e-12)
    assert [r["num_participants"] for r in records] == [2] * 3


def simulator_for(config, backend):
    return simulator_from_config(config, build_federation(config, torch.device("cpu")), backend=backend)


def test_partial_work_cuts_short_and_every_backend_gives_the_same_clock(tmp_path):
    profiles, path = three_client_profiles(tmp_path)
    config = load_config(None, [*THREE, f"run.out_dir={tmp_path}", "system.profiles=file",
                                f"system.profile_file={path}", "system.policy=deadline", "system.partial_work=true",
                                "client.name=scaffold", "server.name=scaffold"])
    task = build_federation(config, torch.device("cpu")).task
    times = hand_times(task, profiles, up_vectors=2, down_vectors=2)    # SCAFFOLD sends and receives c
    deadline = sorted(times)[1] * 0.9          # cuts the two slower clients short
    config = config.with_overrides({"system.deadline": deadline})
    backends = [SequentialBackend(), VectorizedBackend()]
    if fork_available():
        backends.append(ProcessPoolBackend(2))
    results = []
    for backend in backends:
        simulator = simulator_for(config, backend)
        try:
            rounds = [simulator.run_round() for _ in range(2)]
        finally:
            getattr(backend, "close", lambda: None)()
        results.append((rounds, simulator.params, simulator.clock_state.now))
    (rounds, params, now), others = results[0], results[1:]
    record, cohort = rounds[0]
    assert record["clients_cut_short"] == 2 and record["clients_dropped"] == 0
    assert record["round_seconds"] <= deadline
    full_steps = 2 * math.ceil(int(task.client_sizes[0]) / 8)
    assert sorted(cohort.local_steps.tolist())[0] < full_steps
    for other_rounds, other_params, other_now in others:
        assert other_now == now
        assert [strip_clock(r) for r, _ in other_rounds] == [strip_clock(r) for r, _ in rounds]
        torch.testing.assert_close(other_params, params)


def strip_clock(record):
    return {k: record[k] for k in CLOCK_RECORD_KEYS}


def write_trace_file(tmp_path):
    # Client 0 always on; client 1 on in [0, 1] only; client 2 from 0.5 s on.
    path = tmp_path / "trace.csv"
    path.write_text("client,start,end\n0,0,inf\n1,0,1\n2,0.5,inf\n")
    return path


def test_trace_participation_replays_the_trace_and_resumes_bitwise(tmp_path):
    trace = write_trace_file(tmp_path)
    sets = [*THREE, f"run.out_dir={tmp_path}", "participation.name=trace", f"participation.trace_file={trace}",
            "system.profiles=file", f"system.profile_file={three_client_profiles(tmp_path)[1]}",
            "system.policy=deadline", "system.deadline=0.4", "system.partial_work=true", "run.rounds=6",
            "run.checkpoint_every=2"]
    run_experiment(load_config(None, [*sets, "run.name=whole"]))
    records = metrics(tmp_path / "whole")
    for record in records:
        start = record["virtual_seconds"] - record["round_seconds"]
        on = [0] + ([1] if start <= 1 else []) + ([2] if start >= 0.5 else [])
        kept = record["num_participants"] + record["clients_dropped"]
        assert kept == len(on), (start, record)
    config = load_config(None, [*sets, "run.name=cut"])
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, callbacks=[StopAfter(3)])
    resume_run(tmp_path / "cut")
    assert [strip_wall(r) for r in metrics(tmp_path / "cut")] == [strip_wall(r) for r in records]
    saved = load_checkpoint(tmp_path / "cut")["simulator"]
    whole = load_checkpoint(tmp_path / "whole")["simulator"]
    assert torch.equal(saved["params"], whole["params"])
    assert saved["clock"].keys() == whole["clock"].keys()
    for key, value in whole["clock"].items():
        assert torch.equal(saved["clock"][key], value) if isinstance(value, torch.Tensor) else saved["clock"][key] == value
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["virtual_seconds"] == records[-1]["virtual_seconds"]


def strip_wall(record):
    return {k: v for k, v in record.items() if k != "wall_seconds"}


@pytest.mark.parametrize("sets,message", [
    (["participation.name=trace", "participation.trace_file=TRACE"], "needs the virtual clock"),
    (["participation.name=bernoulli", "system.policy=overcommit"], "needs a participation process that chooses k"),
    (["system.partial_work=true"], "applies only to system.policy = 'deadline'"),
    (["system.profiles=file"], "needs a profile file"),
    (["system.deadline=-1"], "must be > 0"),
    (["system.policy=fast"], "allowed: 'sync', 'deadline', 'overcommit'"),
])
def test_config_errors_are_one_line(tmp_path, sets, message):
    trace = write_trace_file(tmp_path)
    sets = [s.replace("TRACE", str(trace)) for s in sets]
    with pytest.raises(ConfigError, match=message) as error:
        load_config(None, [*THREE, *sets])
    assert "\n" not in str(error.value)


def test_a_trace_for_another_federation_is_refused_before_any_round(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("client,start,end\n0,0,10\n1,0,10\n")
    config = load_config(None, [*THREE, f"run.out_dir={tmp_path}", "participation.name=trace",
                                f"participation.trace_file={path}", "system.policy=sync"])
    with pytest.raises(ConfigError, match="lists 2 clients but the partition has 3"):
        run_experiment(config)
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or metrics(tmp_path / "run") == []


def test_a_bad_trace_is_refused_with_the_configuration(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("client,start,end\n0,5,1\n")
    with pytest.raises(ValueError, match="is empty"):
        load_config(None, [*THREE, "participation.name=trace", f"participation.trace_file={path}",
                           "system.policy=sync"])
