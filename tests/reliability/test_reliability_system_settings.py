"""The ``[system]`` section and the clock: a setting that the chosen policy or profile source does not
read is refused (as ``partial_work`` is), option values that overflow are one-line errors, the
virtual clock never records an infinite time, and a run in which no client trains says so."""
from __future__ import annotations

import json
import logging
import math

import pytest

from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError
from fedhet.engine.clock import ClockOverflowError
from fedhet.engine.runner import run_experiment
from fedhet.error_lines import error_line

CLOCK = ["system.policy=sync"]


def _one_line(error: BaseException) -> str:
    line, status = error_line(error)
    assert status == 2 and "\n" not in line and "internal error" not in line
    return line


def _trace(tmp_path, clients: int = 12, on: list | None = None):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"format": "fedhet-availability", "version": 1, "clients": [
        {"client": n, "on": on if on is not None else [[0, "inf"]], "period": None} for n in range(clients)]}))
    return path


@pytest.mark.parametrize("sets,key,allowed", [
    (["system.deadline=5"], "system.deadline", "system.policy = 'deadline'"),
    (["system.overcommit=2"], "system.overcommit", "system.policy = 'overcommit'"),
    (["system.policy=deadline", "system.deadline=5", "system.overcommit=2"], "system.overcommit",
     "system.policy = 'overcommit'"),
    (["system.profiles=tiers", "system.device_flops=1"], "system.device_flops", "system.profiles = 'lognormal'"),
    (["system.profiles=tiers", "system.compute_sigma=0.1"], "system.compute_sigma", "system.profiles = 'lognormal'"),
])
def test_a_system_setting_the_policy_or_source_does_not_read_is_refused(small_config, sets, key, allowed):
    with pytest.raises(ConfigError) as caught:
        small_config(*sets)
    line = _one_line(caught.value)
    assert key in line and f"takes effect only when {allowed}" in line


def test_settings_the_policy_reads_are_still_accepted(small_config):
    assert small_config("system.policy=deadline", "system.deadline=5").system.deadline == 5
    assert small_config("system.policy=overcommit", "system.overcommit=2").system.overcommit == 2
    assert small_config("system.profiles=tiers", "system.latency=0.2").system.latency == 0.2


@pytest.mark.parametrize("sets", [["system.compute_sigma=1000"], ["system.bandwidth_sigma=1000"]])
def test_sigmas_that_would_overflow_are_refused_as_options(small_config, sets):
    with pytest.raises(ConfigError, match="<= 10") as caught:
        small_config(*CLOCK, *sets)
    _one_line(caught.value)


def test_an_overcommit_beyond_every_client_chooses_every_client(small_config):
    config = small_config("system.policy=overcommit", "system.overcommit=1e308", "run.rounds=1", "run.name=oc")
    summary = run_experiment(config)
    assert summary["rounds"] == 1


@pytest.mark.parametrize("sets", [["system.latency=1e308"], ["system.device_flops=1e-300"]])
def test_the_clock_stops_with_one_line_before_recording_an_infinite_time(small_config, tmp_path, sets):
    config = small_config(*CLOCK, *sets, "run.rounds=400", "run.name=inf")
    with pytest.raises(ClockOverflowError, match="virtual clock would reach inf seconds") as caught:
        run_experiment(config)
    _one_line(caught.value)
    text = (tmp_path / "inf" / "metrics.jsonl").read_text()
    assert "Infinity" not in text and "NaN" not in text
    for line in text.splitlines():
        assert math.isfinite(json.loads(line).get("virtual_seconds", 0.0))


def test_explore_or_known_participation_over_a_trace_without_probabilities_is_a_config_error(small_config, tmp_path):
    trace = _trace(tmp_path)
    sets = [*CLOCK, "participation.name=trace", f"participation.trace_file={trace}", "run.rounds=1"]
    with pytest.raises(ConfigError, match="participation.explore") as caught:
        run_experiment(small_config(*sets, "participation.explore=true", "run.name=explore"))
    _one_line(caught.value)
    with pytest.raises(ConfigError, match="known_participation") as caught:
        run_experiment(small_config(*sets, "participation.clients_per_round=4", "server.name=known_participation",
                                    "run.name=known"))
    _one_line(caught.value)


@pytest.mark.parametrize("case", ["deadline", "trace"])
def test_a_run_in_which_no_client_ever_trains_warns_naming_the_reason(small_config, tmp_path, caplog, case):
    if case == "deadline":
        sets = ["system.policy=deadline", "system.deadline=1e-300"]
        reason = "system.deadline = 1e-300 s is shorter than their completion times"
    else:
        sets = [*CLOCK, "participation.name=trace", f"participation.trace_file={_trace(tmp_path, on=[])}"]
        reason = "no client of participation.trace_file"
    with caplog.at_level(logging.WARNING, logger="fedhet.engine.runner"):
        run_experiment(small_config(*sets, "run.rounds=12", f"run.name={case}"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no client has trained in the 10 rounds so far" in w and reason in w for w in warnings)
    assert any("no client trained in any of the 12 rounds" in w and reason in w for w in warnings)


def test_a_run_in_which_clients_train_gives_no_empty_round_warning(small_config, caplog):
    with caplog.at_level(logging.WARNING, logger="fedhet.engine.runner"):
        run_experiment(small_config("run.rounds=2", "run.name=fine"))
    assert not [r for r in caplog.records if "no client" in r.getMessage()]


def test_a_data_client_column_that_the_partition_would_ignore_is_refused():
    sets = ["data.name=hf", "data.path=/nonexistent", "data.client_column=writer_id"]
    with pytest.raises(ConfigError, match="is read only with partition.name = 'natural'") as caught:
        load_config(None, [*sets, "partition.name=iid"])
    _one_line(caught.value)
    assert load_config(None, [*sets, "partition.name=natural"]).data.options.client_column == "writer_id"
