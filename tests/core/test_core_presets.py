"""The presets shipped as package data (``fedhet init``)."""
from pathlib import Path

import pytest

import fedhet.presets as presets
from fedhet import load_config
from fedhet.cli import main
from fedhet.presets import (
    DEFAULT_PRESET,
    ConfigExistsError,
    PresetError,
    ShippedConfigsError,
    preset_names,
    preset_text,
    shipped_configs_dir,
    write_preset,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_preset_is_a_valid_config(tmp_path):
    assert DEFAULT_PRESET in preset_names()
    for name in preset_names():
        path = write_preset(name, tmp_path)
        assert path == tmp_path / f"{name}.toml"
        assert load_config(path).run.name == name


def test_shipped_copies_of_the_repository_configs_are_identical():
    # The package ships copies of configs/*.toml so that an installed fedhet needs no checkout; a
    # preset edited in one place only would silently differ.
    copies = [name for name in preset_names() if (ROOT / "configs" / f"{name}.toml").exists()]
    assert len(copies) == 5
    for name in copies:
        assert preset_text(name) == (ROOT / "configs" / f"{name}.toml").read_text(encoding="utf-8"), name


def test_write_preset_keeps_an_existing_file_unless_overwrite(tmp_path):
    target = tmp_path / "mine.toml"
    target.write_text("# my edits\n")
    with pytest.raises(ConfigExistsError, match="already exists") as caught:
        write_preset("fmnist_fedavg", target)
    assert isinstance(caught.value, FileExistsError)
    assert target.read_text() == "# my edits\n"
    write_preset("fmnist_fedavg", target, overwrite=True)
    assert target.read_text() == preset_text("fmnist_fedavg")


def test_unknown_preset_names_the_available_ones():
    with pytest.raises(PresetError, match="available presets: .*synthetic_quickstart") as caught:
        preset_text("fmnist_fedavg.toml")
    assert isinstance(caught.value, ValueError)


def test_cli_init_writes_the_default_preset_and_refuses_to_overwrite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert (tmp_path / f"{DEFAULT_PRESET}.toml").read_text() == preset_text(DEFAULT_PRESET)
    assert main(["init"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["init", "--preset", "fmnist_fedaware", "sub/exp.toml"]) == 0
    assert (tmp_path / "sub" / "exp.toml").read_text() == preset_text("fmnist_fedaware")
    capsys.readouterr()
    assert main(["init", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == preset_names(groups=True) and listed[:len(preset_names())] == preset_names()
    assert main(["init", "--preset", "nope"]) == 2
    assert capsys.readouterr().err.startswith("fedhet: preset 'nope' does not exist")


def test_init_lists_and_writes_every_paper_and_cpu_preset(tmp_path):
    listed = preset_names(groups=True)
    for group in ("papers", "cpu"):
        files = sorted((ROOT / "configs" / group).rglob("*.toml"))
        names = [f"{group}/{path.relative_to(ROOT / 'configs' / group).as_posix()[:-5]}" for path in files]
        assert files and set(names) <= set(listed), group
    path = write_preset("papers/fedaware_t2_cifar10", tmp_path)
    assert path == tmp_path / "fedaware_t2_cifar10.toml"
    assert path.read_text() == (ROOT / "configs" / "papers" / "fedaware_t2_cifar10.toml").read_text()
    assert load_config(path).run.name == "fedaware_t2_cifar10"
    assert write_preset("cpu/compare/algorithms.variants", tmp_path).name == "algorithms.variants.toml"


def _installed_layout(tmp_path, monkeypatch):
    """fedhet as a wheel installs it: no checkout, the configs under fedhet/shipped/<kind>."""
    package = tmp_path / "site" / "fedhet"
    for kind in ("claims", "papers", "cpu"):
        for path in (ROOT / "configs" / kind).rglob("*.toml"):
            target = package / "shipped" / kind / path.relative_to(ROOT / "configs" / kind)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (package / "configs").mkdir()
    monkeypatch.setattr(presets, "_checkout_configs", lambda: tmp_path / "no_checkout" / "configs")
    real_files = presets.resources.files
    monkeypatch.setattr(presets.resources, "files",
                        lambda name: package if name == "fedhet" else real_files(name))
    return package


def test_an_installed_fedhet_finds_its_claims_without_a_checkout(tmp_path, monkeypatch, capsys):
    package = _installed_layout(tmp_path, monkeypatch)
    assert shipped_configs_dir("claims") == package / "shipped" / "claims"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["claims", "list"]) == 0
    assert "claims," in capsys.readouterr().out
    assert "papers/fedau_t1_cifar10" in preset_names(groups=True)


def test_missing_shipped_configs_are_named_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(presets, "_checkout_configs", lambda: tmp_path / "no_checkout" / "configs")
    monkeypatch.setattr(presets.resources, "files", lambda name: tmp_path / "empty_package")
    with pytest.raises(ShippedConfigsError, match="configs/claims are not installed"):
        shipped_configs_dir("claims")
