"""Availability traces, profile files and FedScale pickles: every malformed input is a one-line
error naming the file (exit 2), never a Python exception read as a bug in fedhet, and no column or
key is silently ignored."""
from __future__ import annotations

import json
import os
import pickle

import pytest

from fedhet.core.traces import TraceError, read_trace
from fedhet.error_lines import error_line
from fedhet.system.fedscale import convert
from fedhet.system.profiles import ProfileError, read_profiles

TRACE_JSON = {"format": "fedhet-availability", "version": 1,
              "clients": [{"client": 0, "on": [[0, 10]]}, {"client": 1, "on": [[5, 20]]}]}
PROFILE_ROW = "0,1e9,,1e6,1e7,0.1\n"
PROFILE_HEADER = "client,device_flops,seconds_per_sample,uplink_bps,downlink_bps,latency\n"


def _deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


def _user_error(error: BaseException) -> str:
    line, status = error_line(error)
    assert status == 2 and "\n" not in line and "internal error" not in line
    return line


@pytest.mark.parametrize("reader,error_type,suffix", [(read_trace, TraceError, ".json"),
                                                      (read_profiles, ProfileError, ".json"),
                                                      (read_profiles, ProfileError, ".csv"),
                                                      (read_trace, TraceError, ".csv")])
def test_non_utf8_and_deeply_nested_inputs_are_one_line_errors_naming_the_file(tmp_path, reader, error_type, suffix):
    binary = tmp_path / f"latin1{suffix}"
    binary.write_bytes(b"client,start,end\n0,0,\xe9\xff\n")
    with pytest.raises(error_type, match="not UTF-8 text") as caught:
        reader(binary)
    assert str(binary) in _user_error(caught.value)
    if suffix == ".json":
        deep = tmp_path / f"deep{suffix}"
        deep.write_text(_deep_json())
        with pytest.raises(error_type, match="nested too deeply") as caught:
            reader(deep)
        assert str(deep) in _user_error(caught.value)


@pytest.mark.parametrize("reader,error_type", [(read_trace, TraceError), (read_profiles, ProfileError)])
def test_a_fifo_or_directory_as_an_input_file_is_named_as_such_not_as_missing(tmp_path, reader, error_type):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    for path in (fifo, folder):          # the FIFO is opened without blocking: this returns at once
        with pytest.raises(error_type, match="not a regular file") as caught:
            reader(path)
        assert "no such file" not in _user_error(caught.value)


def test_a_utf8_byte_order_mark_as_spreadsheets_write_it_is_accepted(tmp_path):
    trace = tmp_path / "excel.csv"
    trace.write_bytes(b"\xef\xbb\xbfclient,start,end\r\n0,0,10\r\n1,5,inf\r\n")
    assert read_trace(trace).num_clients == 2
    profiles = tmp_path / "excel_profiles.csv"
    profiles.write_bytes(b"\xef\xbb\xbf" + (PROFILE_HEADER + PROFILE_ROW).encode())
    assert read_profiles(profiles).num_clients == 1


def test_a_trace_row_longer_than_its_header_is_refused_rather_than_its_period_dropped(tmp_path):
    trace = tmp_path / "headerless_period.csv"
    trace.write_text("client,start,end\n0,0,1000,5000\n")
    with pytest.raises(TraceError, match="line 2: 4 values for the header client,start,end"):
        read_trace(trace)
    unknown = tmp_path / "unknown_column.csv"
    unknown.write_text("client,start,end,perod\n0,0,10,100\n")
    with pytest.raises(TraceError, match="the header client,start,end"):
        read_trace(unknown)
    entry = tmp_path / "unknown_key.json"
    entry.write_text(json.dumps({**TRACE_JSON, "clients": [{"client": 0, "on": [[0, 1]], "perod": 10}]}))
    with pytest.raises(TraceError, match="unknown key 'perod'"):
        read_trace(entry)


def test_a_misspelt_profile_column_or_key_is_refused_rather_than_read_as_its_default(tmp_path):
    csv_file = tmp_path / "latncy.csv"
    csv_file.write_text(PROFILE_HEADER.replace("latency", "latncy") + PROFILE_ROW)
    with pytest.raises(ProfileError, match="unknown column 'latncy'; allowed: client, device_flops"):
        read_profiles(csv_file)
    longer = tmp_path / "longer.csv"
    longer.write_text(PROFILE_HEADER + "0,1e9,,1e6,1e7,0.1,7\n")
    with pytest.raises(ProfileError, match="line 2: more values than the header"):
        read_profiles(longer)
    json_file = tmp_path / "device_flop.json"
    json_file.write_text(json.dumps({"format": "fedhet-profiles", "version": 1, "clients": [
        {"client": 0, "seconds_per_sample": 0.01, "uplink_bps": 1e6, "downlink_bps": 1e7, "device_flop": 5}]}))
    with pytest.raises(ProfileError, match="unknown key 'device_flop'"):
        read_profiles(json_file)


def test_fedscale_ids_and_values_beyond_float64_are_one_line_errors(tmp_path):
    infinite_key = tmp_path / "inf_key.pkl"
    infinite_key.write_bytes(pickle.dumps({float("inf"): {"computation": 1.0, "communication": 1.0}}, 2))
    with pytest.raises(ProfileError, match="client ids must be integers") as caught:
        convert(infinite_key, tmp_path / "p.csv")
    _user_error(caught.value)
    huge = tmp_path / "huge_value.pkl"
    huge.write_bytes(pickle.dumps({1: {"computation": 10 ** 400, "communication": 1.0}}, 2))
    with pytest.raises(ProfileError, match="an integer of 1329 bits") as caught:
        convert(huge, tmp_path / "p.csv")
    _user_error(caught.value)
    huge_time = tmp_path / "huge_time.pkl"
    huge_time.write_bytes(pickle.dumps({1: {"active": [0], "inactive": [10 ** 400], "finish_time": 10 ** 401}}, 2))
    with pytest.raises(TraceError, match="too large") as caught:
        convert(huge_time, tmp_path / "t.json")
    _user_error(caught.value)


def test_trace_and_profile_integers_beyond_float64_are_one_line_errors(tmp_path):
    """JSON integers have no size limit; one too large for a float is the file's error, not an OverflowError."""
    trace = tmp_path / "t.json"
    trace.write_text('{"format": "fedhet-availability", "clients": [{"client": 0, "on": [[0, 1' + "0" * 400 + "]]}]}")
    with pytest.raises(TraceError, match="an integer of 1329 bits") as caught:
        read_trace(trace)
    _user_error(caught.value)
    profiles = tmp_path / "p.json"
    profiles.write_text(json.dumps({"format": "fedhet-profiles", "clients": [
        {"client": 0, "seconds_per_sample": 10 ** 400, "uplink_bps": 1e6, "downlink_bps": 1e6}]}))
    with pytest.raises(ProfileError, match="an integer of 1329 bits") as caught:
        read_profiles(profiles)
    _user_error(caught.value)
