"""Asynchronous FL on the virtual clock (docs/async.md): hand-computed event sequences of FedBuff and
FedAsync on a three-client federation, the degenerate cases against independent truths (synchronous
rounds, sequential SGD), lost clients, bad input in one line, determinism, backends, kill and resume."""
import json
import math
import warnings

import pytest
import torch

from async_cases import MODES, assert_meaningful, assert_same_async_run, async_run
from fedhet.backends.base import RoundWork, client_batches, client_plan
from fedhet.backends.processes import ProcessPoolBackend, fork_available
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend
from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.core.seeding import torch_generator
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.callbacks import read_metrics
from fedhet.engine.checkpoint import load_checkpoint
from fedhet.engine.federation import build_federation
from fedhet.engine.runner import resume_run, run_experiment
from fedhet.system.profiles import ClientProfiles, write_profiles
from fedhet.testing import _ScriptedParticipation
from small_run import SMALL, StopAfter

THREE = ["data.name=synthetic", "data.num_devices=3", "data.max_device_size=60", "partition.name=natural",
         "partition.num_clients=3", "model.name=logreg", "participation.name=full", "client.learning_rate=0.05",
         "client.batch_size=8", "client.epochs=2", "run.rounds=4", "run.progress=false"]
# c_n, links and latency per client: full-work times 0.33072, 1.7552 and 2.408 s (hand_times).
SECONDS_PER_SAMPLE, UPLINK, DOWNLINK, LATENCY = [0.001, 0.004, 0.02], [1e5, 2e4, 5e4], [1e6, 1e5, 2e5], [0.01, 0.1, 0.0]


def profile_file(tmp_path, n=3, equal=False):
    def column(values):
        return torch.tensor([values[0]] * n if equal else values, dtype=torch.float64)
    profiles = ClientProfiles(device_flops=torch.full((n,), math.nan, dtype=torch.float64),
                              seconds_per_sample=column(SECONDS_PER_SAMPLE), uplink_bps=column(UPLINK),
                              downlink_bps=column(DOWNLINK), latency=column(LATENCY))
    path = tmp_path / f"profiles{n}{equal}.json"
    write_profiles(profiles, path)
    return path


def hand_times(task):
    """T_n = 2 L + 8 S / v + 8 S / u + c (2 epochs x n_n examples), S = 4 d bytes (float32 x)."""
    d = task.spec.dim
    return [2 * LATENCY[n] + 8 * 4 * d / DOWNLINK[n] + 8 * 4 * d / UPLINK[n]
            + SECONDS_PER_SAMPLE[n] * 2 * int(task.client_sizes[n]) for n in range(3)]


def three_client(tmp_path, *sets, backend=None):
    config = load_config(None, [*THREE, "system.profiles=file", f"system.profile_file={profile_file(tmp_path)}", *sets])
    federation = build_federation(config, torch.device("cpu"))
    simulator = simulator_from_config(config, federation, backend=backend)
    simulator.event_log = []
    return simulator


def train_alone(simulator, client, version, params):
    """Client ``client``'s update from ``params`` with the streams of round ``version``, trained outside the loop."""
    work = RoundWork(round_index=version, seed=simulator.seed, params=params,
                     client_ids=torch.tensor([client]), client_states={}, broadcast={},
                     learning_rate=simulator.learning_rate(version))
    cohort, _ = SequentialBackend().train_cohort(simulator.task, simulator.solver, work)
    return cohort.deltas[0]


def approx_rows(rows, expected):
    return len(rows) == len(expected) and all(row == pytest.approx(want) for row, want in zip(rows, expected))


def events(simulator, kind):
    return [{k: v for k, v in e.items() if k != "event"} for e in simulator.event_log if e["event"] == kind]


def test_fedbuff_event_sequence_of_three_clients_by_hand(tmp_path):
    # C = 3, K = 2, s(tau) = (1 + tau)^(-1/2); the full-work times T0, T1, T2 order the arrivals as checked.
    simulator = three_client(tmp_path, "asynchronous.concurrency=3", "asynchronous.buffer_size=2")
    T0, T1, T2 = hand_times(simulator.task)
    assert T0 < T1 < T1 + T0 < T2 < T2 + T0 < 2 * T1 < 2 * T1 + T0 < 2 * T2
    x0 = simulator.params.clone()
    records = [simulator.run_round()[0] for _ in range(2)]
    x2 = simulator.params.clone()
    records += [simulator.run_round()[0] for _ in range(2)]
    s1 = 2 ** -0.5
    # Every client starts at 0 from version 0; 0 arrives first and waits in the buffer (it may not
    # restart before the step); 1's arrival fills it: version 1 at T1, and 0, 1 start from it.
    # 0 arrives again at T1 + T0; 2 (from version 0, tau = 1) fills the buffer at T2: version 2, 0 and
    # 2 start from it; 0 arrives at T2 + T0; 1 (from version 1, tau 1) at 2 T1: version 3.
    assert approx_rows([(e["time"], e["client"], e["version"], e["staleness"], e["weight"])
                        for e in events(simulator, "arrival")],
                       [(T0, 0, 0, 0, 1.0), (T1, 1, 0, 0, 1.0), (T1 + T0, 0, 1, 0, 1.0), (T2, 2, 0, 1, s1),
                          (T2 + T0, 0, 2, 0, 1.0), (2 * T1, 1, 1, 1, s1), (2 * T1 + T0, 0, 3, 0, 1.0),
                        (2 * T2, 2, 2, 1, s1)])
    starts = events(simulator, "start")
    assert approx_rows(sorted((e["time"], e["client"], e["version"]) for e in starts), sorted(
        [(0.0, 0, 0), (0.0, 1, 0), (0.0, 2, 0), (T1, 0, 1), (T1, 1, 1), (T2, 0, 2), (T2, 2, 2),
         (2 * T1, 0, 3), (2 * T1, 1, 3)]))
    assert [r["virtual_seconds"] for r in records] == pytest.approx([T1, T2, 2 * T1, 2 * T2])
    assert [(r["staleness_mean"], r["staleness_max"]) for r in records] == [(0, 0), (0.5, 1), (0.5, 1), (0.5, 1)]
    assert [r["clients_started"] for r in records] == [3, 2, 2, 2]
    # Version 2 = version 1 + the data-size average (equal sizes: 1/2 each) of 0's update from
    # version 1 and 2's update from version 0 weighted by s(1).
    x1 = x0 + 0.5 * (train_alone(simulator, 0, 0, x0) + train_alone(simulator, 1, 0, x0))
    expected = x1 + 0.5 * (train_alone(simulator, 0, 1, x1) + s1 * train_alone(simulator, 2, 0, x0))
    torch.testing.assert_close(x2, expected, rtol=1e-5, atol=1e-6)
    # bytes: 3 downloads before version 1, 2 uploads in it; 4 d bytes each (float32 logreg).
    d4 = 4 * simulator.task.spec.dim
    assert (records[0]["bytes_down"], records[0]["bytes_up"]) == (3 * d4, 2 * d4)


def start_draws(seed, eligible_per_start):
    """Who starts, by the documented rule: eligible ids ascending, one uniform draw from the stream
    (seed, "async_start", k) for the k-th start of the run."""
    chosen = []
    for k, eligible in enumerate(eligible_per_start):
        generator = torch_generator(seed, "async_start", k)
        chosen.append(eligible[int(torch.randint(len(eligible), (1,), generator=generator))])
    return chosen


def test_fedasync_event_sequence_of_three_clients_by_hand(tmp_path):
    # C = 2, alpha = 0.5, s(tau) = (1 + tau)^(-1/2): every arrival is a server step.
    simulator = three_client(tmp_path, "asynchronous.mode=fedasync", "asynchronous.concurrency=2",
                             "asynchronous.alpha=0.5")
    T = hand_times(simulator.task)
    x0 = simulator.params.clone()
    record, _ = simulator.run_round()
    x1 = simulator.params.clone()
    records = [record] + [simulator.run_round()[0] for _ in range(3)]
    # t = 0: two of {0, 1, 2} start (draws 0 and 1); the first to arrive gives version 1 ...
    first = start_draws(simulator.seed, [[0, 1, 2]])[0]
    second = start_draws(simulator.seed, [[0, 1, 2], [c for c in (0, 1, 2) if c != first]])[1]
    starts = events(simulator, "start")
    assert [(e["time"], e["client"], e["version"]) for e in starts[:2]] == [(0.0, first, 0), (0.0, second, 0)]
    a, b = sorted((first, second), key=lambda c: T[c])
    left = ({0, 1, 2} - {first, second}).pop()
    arrivals = events(simulator, "arrival")
    assert (arrivals[0]["client"], arrivals[0]["time"], arrivals[0]["staleness"]) == (a, pytest.approx(T[a]), 0)
    # ... at T_a the only idle client left starts from version 1 (draw 2 has one candidate: a just
    # arrived and is idle too, so both are eligible).
    third = start_draws(simulator.seed, [[0, 1, 2], [0, 1, 2], sorted({left, a})])[2]
    assert (starts[2]["client"], starts[2]["time"], starts[2]["version"]) == (third, pytest.approx(T[a]), 1)
    # x1 = (1 - alpha) x0 + alpha (x0 + Delta_a): tau = 0, alpha_t = 0.5.
    y = x0 + train_alone(simulator, a, 0, x0)
    torch.testing.assert_close(x1, x0 * 0.5 + y * 0.5, rtol=0, atol=0)
    assert records[0]["mixing_weight"] == 0.5
    for arrival, rec in zip(arrivals, records):
        tau = rec["server_version"] - 1 - arrival["version"]
        assert arrival["staleness"] == tau == rec["staleness_max"]
        assert rec["mixing_weight"] == pytest.approx(0.5 * (1 + tau) ** -0.5)
    assert [r["virtual_seconds"] for r in records] == [e["time"] for e in arrivals[:4]]


def test_fedbuff_with_equal_speeds_and_c_equal_k_is_synchronous_rounds_bitwise(tmp_path):
    sets = [*[s for s in SMALL if not s.startswith("participation.clients_per_round")], "client.steps=3",
            "client.epochs=0", "participation.name=full", "server.name=fedaware"]
    config = load_config(None, [*sets, "system.profiles=file", f"system.profile_file={profile_file(tmp_path, 12, True)}",
                                "asynchronous.concurrency=4", "asynchronous.buffer_size=4",
                                "asynchronous.staleness=constant"])
    federation = build_federation(config, torch.device("cpu"))
    loop = simulator_from_config(config, federation)
    async_records = [loop.run_round()[0] for _ in range(5)]
    assert all(r["staleness_max"] == 0 and r["num_participants"] == 4 for r in async_records)
    cohorts = loop.participation_log
    sync_config = load_config(None, sets)
    sync = simulator_from_config(sync_config, build_federation(sync_config, torch.device("cpu")),
                                 participation=_ScriptedParticipation(cohorts))
    sync_records = [sync.run_round()[0] for _ in range(5)]
    assert torch.equal(loop.params, sync.params)
    for a, s in zip(async_records, sync_records):      # every key of the round (losses, norms, FedAWARE's)
        assert "update_norm" in s and {k: a[k] for k in s} == s


def test_fedasync_with_alpha_1_and_one_client_at_a_time_is_sequential_sgd(tmp_path):
    simulator = three_client(tmp_path, "asynchronous.mode=fedasync", "asynchronous.concurrency=1",
                             "asynchronous.alpha=1", "asynchronous.staleness=constant", "run.rounds=5")
    task = simulator.task
    x = simulator.params.clone()
    for _ in range(5):
        simulator.run_round()
    order = [(e["client"], e["version"]) for e in events(simulator, "arrival")]
    assert [v for _, v in order] == list(range(5))          # concurrency 1: never stale
    # The plain loop: SGD through each client's batches in turn, from the model the previous left.
    model = task.model
    for client, version in order:
        work = RoundWork(round_index=version, seed=simulator.seed, params=x, client_ids=torch.tensor([client]),
                         client_states={}, broadcast={}, learning_rate=0.05)
        for batch in client_batches(task, client_plan(task, simulator.solver.options, work, client), work, client):
            weights = x.clone().requires_grad_(True)
            views = task.spec.views(weights)
            outputs = torch.func.functional_call(model, views, (task.train.inputs[batch],))
            loss = torch.nn.functional.cross_entropy(outputs, task.train.targets[batch])
            (grad,) = torch.autograd.grad(loss, weights)
            x = x - 0.05 * grad
    torch.testing.assert_close(simulator.params, x, rtol=1e-5, atol=1e-6)


def test_a_client_whose_window_closes_first_is_lost_and_counted(tmp_path):
    # Client 1 is on in [0, 1] only and needs T1 = 1.76 s: lost at 1 s, never trained.
    trace = tmp_path / "trace.csv"
    trace.write_text("client,start,end\n0,0,inf\n1,0,1\n2,0,inf\n")
    simulator = three_client(tmp_path, "participation.name=trace", f"participation.trace_file={trace}",
                             "asynchronous.concurrency=3", "asynchronous.buffer_size=2")
    records = [simulator.run_round()[0] for _ in range(3)]
    assert [(e["time"], e["client"]) for e in events(simulator, "lost")] == [(1.0, 1)]
    assert {e["client"] for e in events(simulator, "arrival")} == {0, 2}     # client 1 never arrives
    assert sum(r["clients_lost"] for r in records) == 1 == sum(r["clients_dropped"] for r in records)
    assert all(e["client"] != 1 for e in events(simulator, "start") if e["time"] > 1.0)


@pytest.mark.parametrize("sets,error,message", [
    (["asynchronous.concurrency=4"], ConfigError, "must be at most the number of clients \\(3\\)"),
    (["asynchronous.concurrency=2", "asynchronous.buffer_size=3"], ConfigError, "must be at most asynchronous.concurrency"),
    (["asynchronous.staleness_a=-1"], ConfigError, "must be >= 0"),
    (["participation.name=trace", "participation.trace_file=TRACE"], ConfigError, "no client is ever available"),
    (["asynchronous.mode=fedasync", "server.name=fedadam"], ConfigError, "fedasync"),
    (["asynchronous.alpha=0.5"], ConfigError, "takes effect only when asynchronous.mode = 'fedasync'"),
    (["system.policy=deadline", "system.deadline=3"], ConfigError, "rule of synchronous rounds"),
    (["participation.name=uniform"], ConfigError, "draws the clients itself"),
])
def test_bad_input_is_refused_in_one_line(tmp_path, sets, error, message):
    trace = tmp_path / "never.json"
    trace.write_text(json.dumps({"format": "fedhet-availability", "version": 1,
                                 "clients": [{"client": n, "on": []} for n in range(3)]}))
    with pytest.raises(error, match=message) as raised:
        three_client(tmp_path, "asynchronous.concurrency=2", "asynchronous.buffer_size=2",
                     *[s.replace("TRACE", str(trace)) for s in sets])
    assert "\n" not in str(raised.value)


def test_without_a_clock_the_section_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="needs the virtual clock"):
        load_config(None, [*THREE, "asynchronous.concurrency=2", "asynchronous.buffer_size=2"])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_same_seed_same_numbers_on_every_backend(tmp_path, mode, dtype):
    # Events, clock and staleness numbers bitwise on every backend (the loop runs in this process);
    # the trained numbers bitwise on the backends that run the sequential code (the same backend
    # again, the processes backend's one-thread workers) and, on the vectorised backend, within the
    # tolerance of its synchronous tests (tests/backends/test_backends_vectorized.py).
    reference = async_run(tmp_path, SequentialBackend(), mode, f"run.dtype={dtype}")
    assert_meaningful(reference)
    assert_same_async_run(reference, async_run(tmp_path, SequentialBackend(), mode, f"run.dtype={dtype}"), exact=True)
    if fork_available():
        pool = ProcessPoolBackend(2)
        try:
            assert_same_async_run(reference, async_run(tmp_path, pool, mode, f"run.dtype={dtype}"), exact=True)
            assert pool._pool is not None and pool._pool.size == 1     # one forked worker beside this process
        finally:
            pool.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no silent fallback to the sequential code
        vectorized = async_run(tmp_path, VectorizedBackend(), mode, f"run.dtype={dtype}")
    tolerance = {"rtol": 1e-9, "atol": 1e-12} if dtype == "float64" else {"rtol": 1e-5, "atol": 1e-6}
    assert_same_async_run(reference, vectorized, exact=False, **tolerance)


@pytest.mark.parametrize("backend", ["sequential", pytest.param("processes", marks=pytest.mark.skipif(
    not fork_available(), reason="needs the fork start method"))])
def test_kill_and_resume_gives_the_uninterrupted_run_bitwise(tmp_path, backend):
    # The uninterrupted run on the sequential backend; the interrupted one, and its resume, on ``backend``.
    path = profile_file(tmp_path)
    trace = tmp_path / "trace.csv"
    trace.write_text("client,start,end,period\n0,0,5,6\n1,0,1,\n1,2,inf,\n2,0.5,inf,\n")
    sets = [*THREE, f"run.out_dir={tmp_path}", "system.profiles=file", f"system.profile_file={path}",
            "participation.name=trace", f"participation.trace_file={trace}", "server.name=fedaware",
            "asynchronous.concurrency=3", "asynchronous.buffer_size=2", "run.rounds=8", "run.checkpoint_every=2",
            "run.eval_every=1"]
    run_experiment(load_config(None, [*sets, "run.name=whole", "run.backend=sequential"]))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(load_config(None, [*sets, "run.name=cut", f"run.backend={backend}"]), callbacks=[StopAfter(5)])
    saved = load_checkpoint(tmp_path / "cut")["simulator"]
    # Clients were in flight, some of them trained already (their version's first arrival came).
    assert saved["next_round"] == 4 and saved["asynchronous"]["queue"] and saved["asynchronous"]["trained"]
    resume_run(tmp_path / "cut")

    def strip(records):
        return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in records]
    whole = read_metrics(tmp_path / "whole" / "metrics.jsonl")
    assert strip(read_metrics(tmp_path / "cut" / "metrics.jsonl")) == strip(whole)
    assert torch.equal(load_checkpoint(tmp_path / "cut")["simulator"]["params"],
                       load_checkpoint(tmp_path / "whole")["simulator"]["params"])
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary == {**json.loads((tmp_path / "whole" / "summary.json").read_text()),
                       "name": "cut", "backend": backend, "wall_seconds": summary["wall_seconds"],
                       "seconds_per_round": summary["seconds_per_round"]}
    assert sum(summary["staleness_histogram"].values()) == 2 * 8


def server_names():
    import fedhet.components  # noqa: F401  (registers every server method)
    from fedhet.core.registry import SERVERS
    return [name for name in SERVERS.names() if name != "known_participation"]


@pytest.mark.parametrize("server", server_names())
def test_every_server_method_has_a_buffered_form(tmp_path, server):
    from fedhet.core.registry import ALGORITHMS
    client = next((pair.client for pair in ALGORITHMS.values() if pair.server == server), "sgd")
    simulator = three_client(tmp_path, f"client.name={client}", f"server.name={server}",
                             "asynchronous.concurrency=3", "asynchronous.buffer_size=2")
    x0 = simulator.params.clone()
    records = [simulator.run_round()[0] for _ in range(3)]
    assert torch.isfinite(simulator.params).all() and not torch.equal(simulator.params, x0)
    assert [r["server_version"] for r in records] == [1, 2, 3] and records[1]["staleness_max"] == 1


def test_known_participation_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="synchronous participation probabilities"):
        three_client(tmp_path, "server.name=known_participation", "asynchronous.concurrency=2",
                     "asynchronous.buffer_size=2")


def test_a_trace_that_ends_stops_the_run_in_one_line(tmp_path):
    # Every window closes by 3 s: the loop waits (idle retries) while jobs are lost, then stops.
    trace = tmp_path / "ends.csv"
    trace.write_text("client,start,end\n0,0,3\n1,0,3\n2,0,3\n")
    simulator = three_client(tmp_path, "participation.name=trace", f"participation.trace_file={trace}",
                             "asynchronous.concurrency=3", "asynchronous.buffer_size=3")
    from fedhet.engine.async_loop import AsyncStalledError
    with pytest.raises(AsyncStalledError, match="no client is available after virtual second") as raised:
        for _ in range(4):
            simulator.run_round()
    assert "\n" not in str(raised.value)
    # Version 1 at T2 = 2.41 s; of the three restarting then only client 0 (T0 = 0.33 s) fits before 3 s.
    assert [(e["client"], e["time"]) for e in events(simulator, "lost")] == [(1, 3.0), (2, 3.0)]
    assert simulator.next_round == 1 and len(simulator.buffer) == 1
