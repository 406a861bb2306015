"""The package as a user gets it: ``python -m build`` makes a wheel and an sdist, and the wheel,
installed into a fresh virtual environment beside the pinned torch, runs from outside the checkout.

Nothing is downloaded: pip is pointed only at the machine's local sources (its configured
``find-links`` folders and ``file://`` indexes), and the test is skipped when no local
``torch==2.13.0`` wheel is among them.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from fedhet import load_config, run_experiment

ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"
SHIPPED = ("claims", "papers", "cpu")   # configs/<kind> -> fedhet/shipped/<kind> (setup.py)
PRESETS = ["fmnist_fedavg", "fmnist_fedaware", "fmnist_dir06_fedavg", "fmnist_dir06_fedprox",
           "fmnist_dir06_fedspeed", "synthetic_quickstart"]


def _pip_config() -> dict[str, list[str]]:
    """pip's effective settings (config files and PIP_* variables) as {key: [values]}."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         check=True).stdout
    settings: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]  # "global.find-links" and ":env:.find-links" alike
        settings.setdefault(name, []).extend(value.strip().strip("'\"").split())
    return settings


def _local_pip_env() -> tuple[dict[str, str], Path | None]:
    """Environment for a pip that reads only local sources, and the local torch wheel (or None)."""
    settings = _pip_config()
    links = [os.environ.get("PIP_FIND_LINKS", "")] + settings.get("find-links", [])
    folders = [Path(p.removeprefix("file://")) for link in links for p in link.split() if p]
    folders = [f for f in dict.fromkeys(folders) if f.is_dir()]
    indexes = [u for key in ("index-url", "extra-index-url") for u in settings.get(key, [])
               if u.startswith("file://")]
    wheels = sorted(w for f in folders for w in f.glob("torch-2.13.0*.whl"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    # No config file: its remote index would otherwise be merged in. PYTHONPATH is dropped so that
    # the fresh environment imports the installed wheel, never the checkout's src/.
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_FIND_LINKS=" ".join(str(f) for f in folders))
    if indexes:
        env.update(PIP_INDEX_URL=indexes[0], PIP_EXTRA_INDEX_URL=" ".join(indexes[1:]))
    else:
        env["PIP_NO_INDEX"] = "1"
    return env, (wheels[0] if wheels else None)


def _run(args, *, cwd, env, timeout=300):
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_wheel_installs_in_a_fresh_venv_and_runs_outside_the_checkout(tmp_path):
    env, torch_wheel = _local_pip_env()
    if torch_wheel is None:
        pytest.skip(f"no local {TORCH} wheel in pip's find-links folders ({env['PIP_FIND_LINKS'] or 'none'}); "
                    "installing it would download gigabytes")

    # Build from a copy of the sources a build reads, so the checkout gets no build/ or egg-info.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.py", "MANIFEST.in"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # The claims suite and the papers' and CPU presets, which setup.py ships as fedhet/shipped/<kind>.
    for kind in SHIPPED:
        shutil.copytree(ROOT / "configs" / kind, source / "configs" / kind)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, source], cwd=tmp_path, env=env)
    [wheel] = dist.glob("fedhet-*.whl")
    [sdist] = dist.glob("fedhet-*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        wheel_names = set(archive.namelist())
    with tarfile.open(sdist) as archive:
        sdist_names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for preset in PRESETS:
        assert f"fedhet/configs/{preset}.toml" in wheel_names
        assert f"src/fedhet/configs/{preset}.toml" in sdist_names
    assert "fedhet/py.typed" in wheel_names and "pyproject.toml" in sdist_names
    for kind in SHIPPED:
        expected = {path.relative_to(ROOT / "configs" / kind).as_posix()
                    for path in (ROOT / "configs" / kind).rglob("*.toml")}
        assert expected and all(f"fedhet/shipped/{kind}/{name}" in wheel_names for name in expected), kind
        assert all(f"configs/{kind}/{name}" in sdist_names for name in expected), kind

    # A fresh environment without pip of its own: the outer pip installs into it (--python), the pinned
    # torch and the wheel in one command, as the README's install line does. --no-compile: pip's
    # byte-compiling of torch's files took more than half the install (415 s against 176 s on a loaded
    # 2-core machine); Python compiles what the commands below import as they import it, and a compile
    # failure would not fail pip's install anyway.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile", TORCH, wheel],
         cwd=tmp_path, env=env, timeout=600)
    versions = _run([python, "-c", "import fedhet, torch; print(fedhet.__file__); print(torch.__version__)"],
                    cwd=tmp_path, env=env).split()
    assert Path(versions[0]).is_relative_to(venv), "the fresh venv imported fedhet from elsewhere"
    assert versions[1].startswith("2.13.0"), f"the pinned torch was replaced by {versions[1]}"

    # From a directory outside the checkout: a starter config, its check, and a two-round run.
    work = tmp_path / "work"
    work.mkdir()
    fedhet = venv / "bin" / "fedhet"
    _run([fedhet, "init", "--preset", "synthetic_quickstart", "quick.toml"], cwd=work, env=env)
    checked = _run([fedhet, "check", "quick.toml"], cwd=work, env=env)
    assert 'name = "synthetic"' in checked and 'name = "synthetic_quickstart"' in checked
    overrides = ["run.rounds=2", "run.progress=false"]
    _run([fedhet, "run", "quick.toml", *[a for o in overrides for a in ("--set", o)]], cwd=work, env=env)
    records = [json.loads(line) for line in
               (work / "runs" / "synthetic_quickstart" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2]

    # The claims and every preset come with the wheel: no checkout in sight of the work directory.
    listing = _run([fedhet, "claims", "list"], cwd=work, env=env)
    assert "claims," in listing and "runs (default tier)" in listing
    presets = _run([fedhet, "init", "--list"], cwd=work, env=env).split()
    assert set(PRESETS) <= set(presets) and "papers/fedaware_t2_cifar10" in presets and "cpu/fedau_t1_fmnist" in presets
    _run([fedhet, "init", "--preset", "papers/fedaware_t2_cifar10"], cwd=work, env=env)
    assert 'name = "fedaware_t2_cifar10"' in _run([fedhet, "check", "fedaware_t2_cifar10.toml"], cwd=work, env=env)

    # The lab's verbs from the wheel: a sweep, its report, a grid search.
    _run([fedhet, "sweep", "quick.toml", "--quiet", "--grid", "server.name=fedavg,fedaware", "--seeds", "1",
          "--out", "sweep", *[a for o in overrides for a in ("--set", o)]], cwd=work, env=env)
    assert sorted(p.name for p in (work / "sweep").iterdir() if (p / "summary.json").is_file()) == [
        "synthetic_quickstart__server.name=fedavg__seed=1", "synthetic_quickstart__server.name=fedaware__seed=1"]
    _run([fedhet, "report", "sweep", "--out", "report"], cwd=work, env=env)
    assert "fedaware" in (work / "report" / "report.md").read_text()
    _run([fedhet, "tune", "quick.toml", "--param", "client.learning_rate=0.01,0.05", "--criterion",
          "train_loss@2", "--out", "tune", *[a for o in overrides for a in ("--set", o)]], cwd=work, env=env)
    assert (work / "tune" / "best.toml").is_file() and (work / "tune" / "trials.csv").is_file()

    # The installed package computes what the checkout computes (same config and seed).
    config = load_config(work / "quick.toml", [*overrides, f"run.out_dir={tmp_path / 'reference'}"])
    run_experiment(config)
    reference = [json.loads(line) for line in
                 (tmp_path / "reference" / "synthetic_quickstart" / "metrics.jsonl").read_text().splitlines()]
    assert [r["test_accuracy"] for r in records] == [r["test_accuracy"] for r in reference]
