"""The Flower internals the bridge relies on (fedhet.flower.flwr_compat) work on the installed Flower,
whose minor version must be one they were checked on, and the `flower` extra allows no other."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

flwr = pytest.importorskip("flwr")

from flwr.app import Message, RecordDict  # noqa: E402

from fedhet.flower import flwr_compat  # noqa: E402

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_the_installed_flower_is_one_the_bridge_was_checked_on_1_41_or_1_42():
    assert flwr_compat.CHECKED_ON == ("1.41", "1.42")
    assert _minor(flwr.__version__) in flwr_compat.CHECKED_ON, (
        f"Flower {flwr.__version__}: check fedhet/flower/flwr_compat.py's internals and run tests/flower/ "
        "on it, then add it to CHECKED_ON and to the pins in pyproject.toml")


def test_messages_made_after_setting_the_task_identity_carry_its_run_and_source():
    flwr_compat.set_task_identity(run_id=7)
    message = Message(RecordDict(), dst_node_id=3, message_type="train")
    assert (message.metadata.run_id, message.metadata.src_node_id, message.metadata.dst_node_id) == (
        7, flwr_compat.SUPERLINK_NODE_ID, 3)
    flwr_compat.set_message_id(message, "abc")
    assert message.metadata.message_id == "abc"
    reply = Message(RecordDict(), reply_to=message)
    assert reply.metadata.reply_to_message_id == "abc" and reply.metadata.run_id == 7


def test_the_flower_pins_allow_exactly_the_checked_minor_versions():
    project = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    pins = [item for extra in ("flower", "dev") for item in project[extra] if re.match(r"flwr\b(?!-)", item)]
    assert len(pins) == 2
    for pin in pins:
        match = re.fullmatch(r"flwr(?:\[[a-z]+\])?>=(\d+\.\d+),<(\d+)\.(\d+)", pin)
        assert match is not None, pin
        low, _, high_minor = match.groups()
        allowed = [f"1.{minor}" for minor in range(int(low.split(".")[1]), int(high_minor))]
        assert tuple(allowed) == flwr_compat.CHECKED_ON, pin
