"""The serving worker's protocol (``python -m fedhet.lab.sweep.worker --serve``): a malformed request is
answered with status 2 and one line on stderr, and the worker goes on serving; it never dies with a
traceback (exit 1, which `tune --jobs` reads as the machine failing), answers 3 (a bug), or runs the
all-defaults experiment into its working directory."""
from __future__ import annotations

import io
import json
import os

import pytest

from fedhet.config.schema import config_to_toml, load_config
from fedhet.lab.sweep import worker
from small_run import SMALL

MALFORMED = ["garbage", "[1, 2]", "{}", '{"run_dir": 5}', '{"run_dir": "", "config": ""}',
             '{"run_dir": "RUN", "config": 7}', '{"run_dir": "RUN"}', '{"run_dir": "RUN", "config": "[run\\nx = "}',
             '{"run_dir": "RUN", "resume": "yes"}']


@pytest.mark.parametrize("line", MALFORMED)
def test_a_malformed_request_is_answered_with_status_2_and_the_worker_goes_on(tmp_path, capfd, line, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    good = json.dumps({"run_dir": str(tmp_path / "good"), "resume": False,
                       "config": config_to_toml(load_config(None, [*SMALL, "run.rounds=1", "run.name=good"]))})
    replies = io.StringIO()
    worker.serve([line.replace("RUN", str(run_dir)) + "\n", good + "\n"], replies)
    answers = [json.loads(reply) for reply in replies.getvalue().splitlines()]
    assert [answer["status"] for answer in answers] == [2, 0]
    err = capfd.readouterr().err
    assert "Traceback" not in err
    if "[run" in line:      # a well-formed request whose TOML is not: the run's own log says why
        # (the log is fd 2 during the run; pytest's capture keeps sys.stderr, so the line may land there)
        assert "fedhet: the run's configuration is not valid TOML" in err + (run_dir / worker.LOG_FILE).read_text()
    else:
        refused = [text for text in err.splitlines() if text.startswith("fedhet:")]
        assert len(refused) == 1 and refused[0].startswith("fedhet: worker request refused: ")
    assert not (tmp_path / "metrics.jsonl").exists() and sorted(os.listdir(tmp_path)) in (["good"], ["good", "run"])
