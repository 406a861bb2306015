"""An Optuna journal damaged before its last line cannot be replayed: the tune stops with one line
naming the file and the line, instead of Optuna's JSONDecodeError read as a bug in fedhet."""
import shutil

import pytest
from least_squares_runner import LeastSquaresRunner

import fedhet.components  # noqa: F401  (registers the solvers and servers)
from fedhet.error_lines import error_line
from fedhet.lab.tuning.criteria import Criterion
from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.search import JOURNAL_FILE, SearchSettings, run_search
from fedhet.lab.tuning.space import parse_parameter
from fedhet.problems.least_squares import make_least_squares

ROUNDS = 6


def test_a_journal_damaged_before_its_last_line_is_one_line_naming_it(tmp_path):
    pytest.importorskip("optuna")
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=12, scale_spread=0.5, seed=3)
    settings = SearchSettings(space=(parse_parameter("client.learning_rate=log:0.01:10:2"),),
                              criterion=Criterion("train_loss", ROUNDS), sampler="optuna", trials=3, seed=7,
                              startup_trials=2)
    run_search(settings, LeastSquaresRunner(problem, ROUNDS), tmp_path / "whole")
    shutil.copytree(tmp_path / "whole", tmp_path / "damaged")
    journal = tmp_path / "damaged" / JOURNAL_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b":", b" ", 1)                  # line 2 of many: not the torn tail
    journal.write_bytes(b"".join(lines))
    with pytest.raises(TuneError, match=f"{journal}: line 2 is not a JSON record") as caught:
        run_search(settings, LeastSquaresRunner(problem, ROUNDS), tmp_path / "damaged")
    line, status = error_line(caught.value)
    assert status == 2 and "internal error" not in line
