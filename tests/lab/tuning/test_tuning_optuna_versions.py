"""An Optuna search names the Optuna version and the sampler flags it ran with, and is continued only
under that Optuna major version and those flags (Optuna 5.0 changed TPESampler's defaults and its
Parzen bandwidth: the same --seed draws other trials under 4.x and 5.x). docs/tuning.md, "Optuna versions"."""
import json
from pathlib import Path

import pytest
from least_squares_runner import LeastSquaresRunner, optuna_settings, trial_table
from test_tuning_command import SMALL_TOML

import fedhet.components  # noqa: F401  (registers the solvers and servers)
from fedhet.cli import main
from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.search import JOURNAL_FILE, SEARCH_FILE, run_search
from fedhet.problems.least_squares import make_least_squares

optuna = pytest.importorskip("optuna")

from fedhet.lab.tuning.optuna_search import TPE_FLAGS  # noqa: E402  (needs optuna only at run time)

ROUNDS = 8
MAJOR = optuna.__version__.split(".")[0]
OTHER_MAJOR = "4.9.0" if MAJOR != "4" else "5.0.0"


@pytest.fixture(scope="module")
def problem():
    return make_least_squares(num_clients=4, dim=3, examples_per_client=12, scale_spread=0.5, seed=3)


def _settings(trials=4):
    return optuna_settings(ROUNDS, trials)


def _edit_record(out: Path, change) -> None:
    path = out / SEARCH_FILE
    saved = json.loads(path.read_text())
    change(saved)
    path.write_text(json.dumps(saved))


def test_a_study_records_its_optuna_version_and_sampler_flags(problem, tmp_path):
    result = run_search(_settings(), LeastSquaresRunner(problem, ROUNDS), tmp_path / "out")
    expected = {"version": optuna.__version__, "sampler": "TPESampler",
                "flags": {"multivariate": False, "group": False, "constant_liar": False, "n_startup_trials": 2}}
    for name in (SEARCH_FILE, "trials.json", "best.json"):
        assert json.loads((tmp_path / "out" / name).read_text())["optuna"] == expected, name
    comment = (tmp_path / "out" / "best.toml").read_text().splitlines()[0]
    assert f"optuna {optuna.__version__}, TPESampler(multivariate=False, group=False, constant_liar=False" in comment
    assert result.best is not None


def test_the_sampler_gets_every_flag_whose_default_optuna_changed(problem, tmp_path, monkeypatch):
    """multivariate and constant_liar (on by default since Optuna 5.0) are passed to every TPE sampler the
    search makes, never left to the default."""
    real = optuna.samplers.TPESampler
    given = []

    def spy(**kwargs):
        given.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(optuna.samplers, "TPESampler", spy)
    run_search(_settings(trials=3), LeastSquaresRunner(problem, ROUNDS), tmp_path / "out")
    assert len(given) >= 3                       # one per trial at least
    for kwargs in given:
        assert {key: kwargs[key] for key in TPE_FLAGS} == TPE_FLAGS
        assert kwargs["n_startup_trials"] == 2 and isinstance(kwargs["seed"], int)


def test_resuming_under_another_optuna_major_version_is_refused_in_one_line(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(SMALL_TOML)
    args = ["tune", str(config), "--param", "client.learning_rate=log:0.01:1:3", "--sampler", "optuna",
            "--trials", "1", "--seed", "3", "--criterion", "train_loss@4", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    capsys.readouterr()
    _edit_record(tmp_path / "out", lambda saved: saved["optuna"].update(version=OTHER_MAJOR))
    journal = (tmp_path / "out" / JOURNAL_FILE).read_bytes()
    assert main([*args[:-4], "--trials", "2", *args[-2:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedhet: ")
    assert f"begun under Optuna {OTHER_MAJOR}; this is Optuna {optuna.__version__}" in err[0]
    assert (tmp_path / "out" / JOURNAL_FILE).read_bytes() == journal            # nothing was run or asked
    assert not (tmp_path / "out" / "trials" / "trial-0001").exists()


def test_another_minor_version_of_the_same_major_continues_the_study(problem, tmp_path):
    whole = run_search(_settings(), LeastSquaresRunner(problem, ROUNDS), tmp_path / "whole")
    run_search(_settings(trials=2), LeastSquaresRunner(problem, ROUNDS), tmp_path / "parts")
    _edit_record(tmp_path / "parts", lambda saved: saved["optuna"].update(version=f"{MAJOR}.0.0"))
    resumed = run_search(_settings(), LeastSquaresRunner(problem, ROUNDS), tmp_path / "parts")
    assert trial_table(resumed) == trial_table(whole)
    assert json.loads((tmp_path / "parts" / SEARCH_FILE).read_text())["optuna"]["version"] == optuna.__version__


def test_a_study_made_with_other_sampler_flags_is_refused(problem, tmp_path):
    run_search(_settings(trials=2), LeastSquaresRunner(problem, ROUNDS), tmp_path / "out")
    _edit_record(tmp_path / "out", lambda saved: saved["optuna"]["flags"].update(multivariate=True))
    runner = LeastSquaresRunner(problem, ROUNDS)
    with pytest.raises(TuneError, match="other sampler settings"):
        run_search(_settings(), runner, tmp_path / "out")
    assert runner.calls == 0


def test_a_study_that_predates_the_record_continues_only_under_optuna_4(problem, tmp_path):
    """A search.json without the record was written by a fedhet that left the flags to Optuna's defaults,
    against Optuna 4, whose defaults are the flags now given: Optuna 4 continues it exactly, another
    major version is refused."""
    whole = run_search(_settings(), LeastSquaresRunner(problem, ROUNDS), tmp_path / "whole")
    run_search(_settings(trials=2), LeastSquaresRunner(problem, ROUNDS), tmp_path / "parts")
    _edit_record(tmp_path / "parts", lambda saved: saved.pop("optuna"))
    runner = LeastSquaresRunner(problem, ROUNDS)
    if MAJOR == "4":
        assert trial_table(run_search(_settings(), runner, tmp_path / "parts")) == trial_table(whole)
        assert json.loads((tmp_path / "parts" / SEARCH_FILE).read_text())["optuna"]["version"] == optuna.__version__
    else:
        with pytest.raises(TuneError, match="did not record its Optuna version"):
            run_search(_settings(), runner, tmp_path / "parts")
        assert runner.calls == 0


def test_the_search_reaches_optuna_through_public_names_only():
    """Trials are reopened through the storage's public API, not a trial's private _trial_id."""
    source = (Path(__file__).parents[3] / "src" / "fedhet" / "lab" / "tuning" / "optuna_search.py").read_text()
    assert "._trial_id" not in source and "._storage" not in source and "._study_id" not in source
