"""Messages go through logging under the ``fedhet`` logger; the CLI sets the level (--quiet,
--verbose); a normal command-line run prints no warning."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedhet
from fedhet.cli import main
from fedhet.config.schema import config_to_toml, load_config
from fedhet.engine.runner import run_experiment
from small_run import SMALL


@pytest.fixture
def restore_fedhet_logger():
    logger = logging.getLogger("fedhet")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_python_api_logs_the_backend_choice_and_still_calls_log(tmp_path, caplog):
    config = load_config(None, [*SMALL, "run.rounds=1", f"run.out_dir={tmp_path}"])
    messages = []
    with caplog.at_level(logging.INFO, logger="fedhet"):
        run_experiment(config, log=messages.append)
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("fedhet.")]
    assert any(m.startswith("backend: sequential") for m in logged)
    assert logged == messages


def _small_toml(tmp_path: Path) -> Path:
    config = load_config(None, [*SMALL, "run.rounds=2", "run.name=cli", f"run.out_dir={tmp_path}"])
    path = tmp_path / "small.toml"
    path.write_text(config_to_toml(config))
    return path


@pytest.mark.parametrize("flag, shown", [(None, True), ("--quiet", False), ("--verbose", True)])
def test_cli_prints_info_unless_quiet(tmp_path, capsys, restore_fedhet_logger, flag, shown):
    config = _small_toml(tmp_path)
    assert main(["run", str(config), "--overwrite", *([flag] if flag else [])]) == 0
    err = capsys.readouterr().err
    assert ("backend: " in err) is shown
    assert ("torch thread(s)" in err) is (flag == "--verbose")       # a DEBUG message
    expected = {None: logging.INFO, "--quiet": logging.WARNING, "--verbose": logging.DEBUG}[flag]
    assert logging.getLogger("fedhet").level == expected


def test_quiet_and_verbose_exclude_each_other(capsys, restore_fedhet_logger):
    with pytest.raises(SystemExit):
        main(["check", "--quiet", "--verbose"])
    assert "exclude each other" in capsys.readouterr().err


def test_a_normal_run_prints_no_warning(tmp_path):
    """Run in a fresh interpreter as a user would (torch imported first thing, no -W options)."""
    source = str(Path(fedhet.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run([sys.executable, "-m", "fedhet.cli", "run", str(_small_toml(tmp_path))],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr.lower(), done.stderr
    assert "backend: " in done.stderr
