"""The presets shipped as package data (``fedhet init``)."""
from pathlib import Path

import pytest

from fedhet import load_config
from fedhet.cli import main
from fedhet.presets import (DEFAULT_PRESET, ConfigExistsError, PresetError, preset_names, preset_text,
                            write_preset)

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
    assert capsys.readouterr().out.split() == preset_names()
    assert main(["init", "--preset", "nope"]) == 2
    assert capsys.readouterr().err.startswith("fedhet: preset 'nope' does not exist")
