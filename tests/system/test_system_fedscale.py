"""FedScale's pickles: the restricted reader refuses code, and hand-made files convert exactly."""
import pickle

import pytest

from fedhet.core.safe_pickle import UnsafePickleError, load_plain_pickle, loads_plain_pickle
from fedhet.core.traces import read_trace
from fedhet.system.fedscale import convert
from fedhet.system.profiles import ProfileError, read_profiles

EXECUTED = []


def record_call(*args):
    EXECUTED.append(args)


class RunsCode:
    """A pickle of this calls ``record_call`` when loaded by pickle.load."""

    def __reduce__(self):
        return (record_call, ("ran",))


def test_a_pickle_whose_reduce_runs_code_is_refused_and_nothing_runs(tmp_path):
    data = pickle.dumps({1: {"computation": 1.0, "communication": RunsCode()}})
    pickle.loads(data)                       # the ordinary reader does run it: the test's control
    assert EXECUTED == [("ran",)]
    EXECUTED.clear()
    path = tmp_path / "client_device_capacity"
    path.write_bytes(data)
    with pytest.raises(UnsafePickleError, match="refused: the pickle names .*record_call"):
        load_plain_pickle(path)
    with pytest.raises(UnsafePickleError):
        convert(path, tmp_path / "out.csv")
    assert EXECUTED == []
    assert not (tmp_path / "out.csv").exists()


def test_bytes_and_sets_are_refused():
    with pytest.raises(UnsafePickleError, match="bytes"):
        loads_plain_pickle(pickle.dumps({1: b"raw"}))
    with pytest.raises(UnsafePickleError):
        loads_plain_pickle(pickle.dumps({1: {2, 3}}))        # a set is built through builtins.set
    with pytest.raises(UnsafePickleError, match="not a readable pickle"):
        loads_plain_pickle(b"not a pickle")


def test_capacity_converts_to_profiles(tmp_path):
    source = tmp_path / "client_device_capacity"
    source.write_bytes(pickle.dumps({10: {"computation": 20.0, "communication": 1000.0},
                                     2: {"computation": 5.0, "communication": 250.5}}))
    message = convert(source, tmp_path / "profiles.csv")
    assert "2 clients" in message
    profiles = read_profiles(tmp_path / "profiles.csv")
    # Renumbered by ascending FedScale id: 2 -> 0, 10 -> 1; c = 3 m / 1000, b = 1000 kbps.
    assert profiles.seconds_per_sample.tolist() == [0.015, 0.06]
    assert profiles.uplink_bps.tolist() == profiles.downlink_bps.tolist() == [250500.0, 1000000.0]
    assert profiles.latency.tolist() == [0.0, 0.0]


def test_behavior_converts_to_a_trace(tmp_path):
    source = tmp_path / "client_behave_trace"
    source.write_bytes(pickle.dumps({
        1: {"duration": 100, "active": [0, 50], "inactive": [10, 80], "finish_time": 100, "model": "Pixel"},
        2: {"duration": 100, "active": [5], "inactive": [95], "finish_time": 100, "model": "iPhone"}}))
    convert(source, tmp_path / "trace.json", kind="behavior")
    trace = read_trace(tmp_path / "trace.json")
    assert trace.intervals == (((0.0, 10.0), (50.0, 80.0)), ((5.0, 95.0),))
    assert trace.periods == (100.0, 100.0)
    with pytest.raises(ProfileError, match="--kind capacity but the file's structure is FedScale's behavior"):
        convert(source, tmp_path / "x.csv", kind="capacity")


def test_cli_convert_prints_one_line_for_a_refused_pickle(tmp_path, capsys):
    from fedhet.cli import main

    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps([RunsCode()]))
    assert main(["traces", "convert", str(path), "--out", str(tmp_path / "out.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refused" in err
    assert EXECUTED == []


def test_a_pipe_in_place_of_the_pickle_is_named_as_such_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "client_behave_trace.pkl"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePickleError, match="not a regular file"):
        load_plain_pickle(fifo)
    with pytest.raises(UnsafePickleError, match="no such file"):
        load_plain_pickle(tmp_path / "missing.pkl")
