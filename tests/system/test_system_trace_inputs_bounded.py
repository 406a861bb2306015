"""Trace and profile inputs cost time and memory in proportion to their size, strict numbers and ids,
and `traces convert` / `traces generate` write only files that fedhet reads back."""
from __future__ import annotations

import json
import math
import pickle
import struct
import time
import tracemalloc

import pytest

from fedhet.cli import main
from fedhet.core.safe_pickle import UnsafePickleError, loads_plain_pickle
from fedhet.core.seeding import numpy_generator
from fedhet.core.traces import AvailabilityTrace, TraceError, read_trace, write_trace
from fedhet.system import synthetic
from fedhet.system.fedscale import capacity_to_profiles, convert
from fedhet.system.profiles import ProfileError, read_profiles


def _peak_bytes(function):
    """(result or exception, peak bytes Python allocated while ``function`` ran)."""
    tracemalloc.start()
    try:
        try:
            outcome = function()
        except Exception as error:  # noqa: BLE001 - returned for the caller to check
            outcome = error
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _cycle_list() -> bytes:
    a: list = []
    a.append(a)
    return pickle.dumps({1: {"computation": a, "communication": 1}}, 2)


def _cycle_dict() -> bytes:
    d: dict = {}
    d["self"] = d
    return pickle.dumps({1: {"computation": d, "communication": 1}}, 2)


def _shared_list_tower() -> bytes:
    level: list = [1.0]
    for _ in range(60):
        level = [level, level]          # 2^60 paths through 61 lists
    return pickle.dumps({1: {"computation": level, "communication": 1}}, 2)


@pytest.mark.parametrize("make", [_cycle_list, _cycle_dict, _shared_list_tower])
def test_a_pickle_that_reaches_a_container_twice_is_refused_at_once(make):
    data = make()
    assert len(data) < 600
    started = time.monotonic()
    with pytest.raises(UnsafePickleError, match="reached twice"):
        loads_plain_pickle(data)
    assert time.monotonic() - started < 5


def test_traces_convert_refuses_a_self_referencing_pickle_in_one_line(tmp_path, capsys):
    source = tmp_path / "cycle.pkl"
    source.write_bytes(_cycle_list())
    assert main(["traces", "convert", str(source), "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedhet: ") and "reached twice" in err[0]
    assert not (tmp_path / "x.csv").exists()


def test_empty_containers_may_repeat():
    # The empty tuple is one shared object; empty containers nest nothing.
    data = pickle.dumps({1: {"computation": 1.0, "communication": 2.0, "a": (), "b": ()},
                         2: {"computation": 3.0, "communication": 4.0, "a": (), "b": []}}, 2)
    assert loads_plain_pickle(data)[2]["a"] == ()


def test_a_large_memo_index_costs_no_memory():
    data = b"\x80\x02]r" + struct.pack("<I", 2 ** 27) + b"."        # 9 bytes: LONG_BINPUT 2^27
    outcome, peak = _peak_bytes(lambda: loads_plain_pickle(data))
    assert outcome == []
    assert peak < 10 * 2 ** 20                    # the C unpickler's memo table: about 2 GB


def test_fedscale_with_an_infinite_finish_time_converts_to_a_trace_that_is_read_back(tmp_path):
    source = tmp_path / "client_behave_trace"
    source.write_bytes(pickle.dumps({1: {"active": [0.0, 50.0], "inactive": [10.0, 60.0], "finish_time": math.inf},
                                     2: {"active": [5.0], "inactive": [20.0], "finish_time": 100.0}}))
    for suffix in (".csv", ".json"):
        out = tmp_path / f"trace{suffix}"
        convert(source, out)
        trace = read_trace(out)                    # what `fedhet check` and a run read
        assert trace.periods == (None, 100.0)      # t mod inf is t: not replayed
        assert trace.intervals == (((0.0, 10.0), (50.0, 60.0)), ((5.0, 20.0),))
        if suffix == ".json":
            json.loads(out.read_text())            # strict JSON: no Infinity or NaN


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_a_trace_the_reader_would_refuse_is_never_written(tmp_path, suffix):
    bad = AvailabilityTrace(intervals=(((0.0, 10.0),),), periods=(math.inf,))
    out = tmp_path / f"trace{suffix}"
    with pytest.raises(TraceError):
        write_trace(bad, out)
    assert not out.exists()


def test_fedscale_non_finite_times_are_refused_naming_the_client(tmp_path):
    source = tmp_path / "client_behave_trace"
    source.write_bytes(pickle.dumps({1: {"active": [0.0], "inactive": [10.0], "finish_time": math.nan}}))
    with pytest.raises(TraceError, match="client 0 period = nan"):
        convert(source, tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()


def test_fedscale_booleans_are_not_numbers_and_ids_are_integers_once_each():
    with pytest.raises(ProfileError, match="must be numbers"):
        capacity_to_profiles({1: {"computation": True, "communication": 1.0}}, "capacity")
    with pytest.raises(ProfileError, match="client id 1 is listed twice"):
        capacity_to_profiles({1: {"computation": 1.0, "communication": 1.0},
                              "1": {"computation": 2.0, "communication": 1.0}}, "capacity")
    for key in (1.5, True, "one"):
        with pytest.raises(ProfileError, match="must be integers"):
            capacity_to_profiles({key: {"computation": 1.0, "communication": 1.0}}, "capacity")
    profiles = capacity_to_profiles({"10": {"computation": 2.0, "communication": 1.0},
                                     2: {"computation": 1.0, "communication": 1.0}}, "capacity")
    assert profiles.seconds_per_sample.tolist() == [0.003, 0.006]          # 2 before "10": by number


def _profile_json(tmp_path, clients):
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"format": "fedhet-profiles", "version": 1, "clients": clients}))
    return path


def _profile(client, **values):
    return {"client": client, "device_flops": 1e9, "uplink_bps": 1e6, "downlink_bps": 1e6, "latency": 0.1, **values}


def test_profile_ids_must_be_integers_and_numbers_not_booleans(tmp_path):
    with pytest.raises(ProfileError, match="client = 3.9: expected an integer"):
        read_profiles(_profile_json(tmp_path, [_profile(n) for n in range(3)] + [_profile(3.9)]))
    with pytest.raises(ProfileError, match="device_flops = True: expected a number"):
        read_profiles(_profile_json(tmp_path, [_profile(0, device_flops=True)]))
    assert read_profiles(_profile_json(tmp_path, [_profile(0), _profile(1)])).num_clients == 2


@pytest.mark.parametrize("huge", [10 ** 8, 10 ** 12])
def test_one_huge_client_id_is_refused_without_allocating_for_it(tmp_path, huge):
    trace = tmp_path / "huge_id.json"
    clients = [{"client": n, "on": [[0, 10]]} for n in range(20)] + [{"client": huge, "on": [[0, 10]]}]
    trace.write_text(json.dumps({"format": "fedhet-availability", "version": 1, "clients": clients}))
    outcome, peak = _peak_bytes(lambda: read_trace(trace))
    assert isinstance(outcome, TraceError) and "client 20 is missing" in str(outcome)
    assert peak < 20 * 2 ** 20
    profiles = _profile_json(tmp_path, [_profile(n) for n in range(20)] + [_profile(huge)])
    outcome, peak = _peak_bytes(lambda: read_profiles(profiles))
    assert isinstance(outcome, ProfileError) and "client 20 is missing" in str(outcome)
    assert peak < 20 * 2 ** 20


@pytest.mark.parametrize("flags, what", [
    (["--horizon", "inf"], "--horizon = inf: must be a finite number"),
    (["--mean-on", "inf"], "--mean-on = inf: must be a finite number"),
    (["--horizon", "10", "--mean-on", "1e-300", "--mean-off", "1e-300"], "on-periods; at most"),
    (["--clients", "100000000000"], "on-periods; at most"),
    (["--spread", "1000"], "--spread = 1000.0: must be at most 10"),
])
def test_traces_generate_refuses_unbounded_traces_before_drawing(tmp_path, capsys, flags, what):
    args = ["traces", "generate", "--clients", "3", "--out", str(tmp_path / "t.json"), *flags]
    started = time.monotonic()
    assert main(args) == 2
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedhet: ") and what in err[0]
    assert not (tmp_path / "t.json").exists()


def test_the_generators_draws_are_bounded_when_a_spread_makes_periods_tiny(monkeypatch):
    # Estimated at 3 on-periods, but a client whose on-periods the spread shrinks by e^-10 or more
    # (and whose off-periods are too short to move the clock) would loop without end.
    seed = next(s for s in range(100) if numpy_generator(s, "trace", 0).standard_normal() < -1)
    monkeypatch.setattr(synthetic, "MAX_TRACE_INTERVALS", 50)
    with pytest.raises(TraceError, match="on-periods; at most"):
        synthetic.synthetic_trace(1, seed=seed, horizon=1000.0, mean_on=500.0, mean_off=1e-300, spread=10.0)
