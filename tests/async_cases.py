"""An asynchronous run for comparing execution backends (docs/async.md, "Determinism and resume"), and
the comparison of two such runs. A uniquely named module (not conftest), so that the engine's and the
Ray backend's tests import it unambiguously.

The federation: eight Synthetic(1,1) clients of 48 examples (batches of 20: a partial last batch), an
MLP, unequal devices (a profile file of lognormal-like speeds and links) and an availability trace in which client 1 (window [0, 0.3] s) and client 2 ([0.2, 0.5] s) are lost on
their first job; FedBuff (C = 4, K = 2) with SCAFFOLD (per-client state written at arrival, a server
stage and a broadcast per downloaded version) and FedAsync (C = 3). Both runs have stale updates
(tau up to 3) and cohorts of several clients trained in one backend call."""
import dataclasses
import math
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from fedhet.config.schema import load_config
from fedhet.core.task import evaluate
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.federation import build_federation
from fedhet.system.profiles import ClientProfiles, write_profiles

TRACE = ("client,start,end\n0,0,inf\n1,0,0.3\n1,0.5,inf\n2,0.2,0.5\n2,0.9,inf\n3,0,inf\n4,0,inf\n5,0,inf\n"
         "6,0,inf\n7,0,inf\n")
FEDERATION = [
    "data.name=synthetic", "data.num_devices=8", "data.max_device_size=60", "partition.name=natural",
    "partition.num_clients=8", "model.name=mlp", "model.hidden=[12]", "client.learning_rate=0.05",
    "client.batch_size=20", "client.epochs=1", "run.progress=false", "system.profiles=file",
    "participation.name=trace",
]
# Seconds per example, links (bit/s) and latency per client; a job takes 0.2 to 0.6 virtual seconds.
PROFILES = {"seconds_per_sample": [0.0023, 0.0074, 0.0042, 0.0018, 0.0026, 0.0029, 0.0030, 0.0043],
            "uplink_bps": [1.26e6, 2.53e6, 1.65e6, 8.75e5, 2.42e6, 1.28e6, 1.48e6, 2.37e6],
            "downlink_bps": [2.2e7, 7.78e6, 7.49e6, 6.01e6, 7.57e6, 8.42e6, 6.64e6, 9.37e6],
            "latency": [0.05] * 8}
MODES = {
    "fedbuff": ["algorithm=scaffold", "asynchronous.concurrency=4", "asynchronous.buffer_size=2"],
    "fedasync": ["asynchronous.mode=fedasync", "asynchronous.concurrency=3"],
}
ROUNDS = 8
# A record's keys that come from the event loop alone (docs/async.md, "Metrics"): no backend may
# change them by a bit. The others (update norms, e_lud, ...) come from the trained numbers.
EVENT_KEYS = {"round", "num_participants", "learning_rate", "virtual_seconds", "round_seconds", "bytes_up",
              "bytes_down", "clients_dropped", "clients_cut_short", "server_version", "staleness_mean",
              "staleness_max", "clients_lost", "clients_started", "concurrency_in_use", "mixing_weight"}


@dataclasses.dataclass
class AsyncRun:
    events: list[dict[str, Any]]           # every start, loss and arrival (AsyncSimulator.event_log)
    records: list[dict[str, Any]]          # one per server step
    summary: dict[str, Any]                # the summary's asynchronous keys
    tensors: dict[str, torch.Tensor]       # the model, the server state, the per-client states


def federation_sets(tmp_path) -> list[str]:
    """The federation's settings, with its trace and profile files written into ``tmp_path``."""
    trace, profiles = tmp_path / "parity_trace.csv", tmp_path / "parity_profiles.json"
    trace.write_text(TRACE)
    write_profiles(ClientProfiles(device_flops=torch.full((8,), math.nan, dtype=torch.float64),
                                  **{key: torch.tensor(values, dtype=torch.float64) for key, values in PROFILES.items()}),
                   profiles)
    return [*FEDERATION, f"participation.trace_file={trace}", f"system.profile_file={profiles}"]


def async_run(tmp_path, backend, mode: str, *sets: str, rounds: int = ROUNDS) -> AsyncRun:
    """``rounds`` server steps of ``MODES[mode]`` on ``backend`` (not closed here: the caller owns it),
    with the final model evaluated through the backend as the runner does."""
    config = load_config(None, [*federation_sets(tmp_path), *MODES[mode], *sets])
    simulator = simulator_from_config(config, build_federation(config, torch.device("cpu")), backend=backend)
    simulator.event_log = []
    records = [simulator.run_round()[0] for _ in range(rounds)]
    test_loss, test_accuracy = evaluate(simulator.task, simulator.params, batch_size=config.run.eval_batch_size,
                                        backend=backend)
    records[-1].update(test_loss=test_loss, test_accuracy=test_accuracy)
    everyone = torch.arange(simulator.task.num_clients)
    tensors = {"params": simulator.params,
               **{f"server/{k}": leaf for k, leaf in enumerate(pytree.tree_leaves(simulator.server_state))
                  if isinstance(leaf, torch.Tensor)},
               **{f"client/{name}": store.read(everyone) for name, store in simulator.client_stores.items()}}
    return AsyncRun(simulator.event_log, records, simulator.async_summary(), tensors)


def assert_same_async_run(reference: AsyncRun, other: AsyncRun, *, exact: bool, rtol: float = 1e-9,
                          atol: float = 1e-12) -> None:
    """The same events, clock and staleness numbers bitwise; the trained numbers (model, server and
    client states, the records' other keys) bitwise when ``exact``, else within ``rtol``/``atol``."""
    assert other.events == reference.events
    assert other.summary == reference.summary
    assert [{k: r[k] for k in EVENT_KEYS & r.keys()} for r in other.records] == \
           [{k: r[k] for k in EVENT_KEYS & r.keys()} for r in reference.records]
    assert [r.keys() for r in other.records] == [r.keys() for r in reference.records]
    if exact:
        assert other.records == reference.records
    else:
        for mine, theirs in zip(other.records, reference.records):
            assert {k: mine[k] for k in mine.keys() - EVENT_KEYS} == pytest.approx(
                {k: theirs[k] for k in theirs.keys() - EVENT_KEYS}, rel=rtol, abs=atol)
    assert other.tensors.keys() == reference.tensors.keys()
    for name, value in reference.tensors.items():
        assert other.tensors[name].dtype == value.dtype, name
        if exact or not value.is_floating_point():
            assert torch.equal(other.tensors[name], value), name
        else:
            torch.testing.assert_close(other.tensors[name], value, rtol=rtol, atol=atol, msg=name)


def assert_meaningful(run: AsyncRun) -> None:
    """The run has what a backend could get wrong: lost jobs, stale updates, multi-client cohorts."""
    assert run.summary["clients_lost_total"] > 0
    assert max(int(tau) for tau in run.summary["staleness_histogram"]) >= 2
    first_arrivals = {}
    for event in run.events:
        if event["event"] == "arrival":
            first_arrivals.setdefault(event["version"], event["time"])
    in_flight = [e for e in run.events if e["event"] == "start" and not e["lost"]]
    # some version was downloaded by several jobs still in flight at its first arrival: one cohort
    assert any(sum(e["version"] == v and e["time"] <= t for e in in_flight) >= 2 for v, t in first_arrivals.items())
