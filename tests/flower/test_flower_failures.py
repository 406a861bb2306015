"""A SuperNode that dies or fails mid-run: the round goes on with the replies that arrived, and its clients
count as not having participated (docs/flower.md, "Failures"). The truth is the sequential simulation in
which exactly the arrived clients trained each round (``flower_cases.simulate_with_arrivals``): the same
model bit for bit, for every method's state (FedAU's intervals, FedAWARE's stale momenta, SCAFFOLD's c
from arrivals only). In process here; tests/flower/test_flower_deploy.py kills a real SuperNode.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("flwr")

from fedhet.flower import build  # noqa: E402
from fedhet.flower.client_app import app as client_app  # noqa: E402
from fedhet.flower.local_grid import LocalGrid  # noqa: E402
from fedhet.flower.messages import ROUND  # noqa: E402
from fedhet.flower.server_app import run_server  # noqa: E402
from fedhet.flower.settings import AppSettings  # noqa: E402
from flower_cases import METHODS, simulate_with_arrivals, small_config, two_nodes  # noqa: E402


class DyingNodeGrid(LocalGrid):
    """Node ``node`` dies when it is sent a round ``>= from_round`` (0-based): that message gets no reply, and
    the node is not connected afterwards."""

    def __init__(self, *args, node: int, from_round: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.node, self.from_round = node, from_round

    def push_messages(self, messages):
        messages = list(messages)
        for message in messages:
            if message.metadata.message_type == "train" and message.metadata.dst_node_id == self.node and \
                    message.content.config_records[ROUND]["round"] >= self.from_round:
                self.drop(self.node)
        return super().push_messages(messages)


def failing_client_app(node: int, round_index: int):
    """fedhet's ClientApp, except that it raises on ``node`` in round ``round_index``."""
    def app(message, context):
        if context.node_id == node and message.metadata.message_type == "train" and \
                message.content.config_records[ROUND]["round"] == round_index:
            raise RuntimeError("disk full")
        return client_app(message, context)
    return app


def run(config, grid_factory):
    settings = AppSettings(config_text=build.config_text(config), round_timeout=0.5)
    grid = grid_factory(settings.to_run_config())
    return run_server(grid, settings), grid


@pytest.mark.parametrize("method", ["fedavg", "fedaware", "fedau", "scaffold", "fedspeed"])
def test_dead_node_clients_count_as_not_participating(method):
    config = small_config(METHODS[method], rounds=5)
    result, grid = run(config, lambda rc: DyingNodeGrid(client_app, two_nodes(), rc, node=2, from_round=2))
    lost = result.hosts[2]
    assert len(result.records) == 5                                   # the run went on
    assert not bool(result.participation[2:, lost].any())             # node 2's clients never trained again
    assert bool(result.participation[:2, lost].any())                 # ... but had before
    # The round it died in waits round-timeout for it; later rounds skip it as not connected.
    first, *later = result.failures
    assert first["round"] >= 3 and first["reason"].startswith("no reply within")
    assert all(failure["reason"] == "not connected" for failure in later)
    assert all(failure["node"] == 2 for failure in result.failures)
    params, log = simulate_with_arrivals(config, result.participation)
    assert torch.equal(log, result.participation)
    assert torch.equal(params, result.params), float((params - result.params).abs().max())


def test_an_error_reply_is_a_failure_and_the_run_goes_on():
    config = small_config(METHODS["fedau"], rounds=4)
    result, _ = run(config, lambda rc: LocalGrid(failing_client_app(node=1, round_index=1), two_nodes(), rc))
    assert [f["round"] for f in result.failures] == [2]
    assert "disk full" in result.failures[0]["reason"] and result.failures[0]["reason"].startswith("error reply")
    assert not bool(result.participation[1, result.hosts[1]].any())
    assert bool(result.participation[2:, result.hosts[1]].any())      # node 1 is back in round 3
    params, _ = simulate_with_arrivals(config, result.participation)
    assert torch.equal(params, result.params)


def test_a_round_with_no_replies_leaves_the_model(tmp_path):
    """Every node dead: each round's cohort is empty and x stays (ComposedServer's rule for no G)."""
    config = small_config(METHODS["fedaware"], rounds=3)

    class AllDead(LocalGrid):
        def push_messages(self, messages):
            messages = list(messages)
            if any(m.metadata.message_type == "train" for m in messages):
                self.dropped.update(self.contexts)
            return super().push_messages(messages)

    result, _ = run(config, lambda rc: AllDead(client_app, two_nodes(), rc))
    initial = build.build_federation(config).task
    assert torch.equal(result.params, initial.spec.flatten(initial.model).to(result.params.dtype))
    assert [r["num_participants"] for r in result.records] == [0, 0, 0]


def _query_fails_on(node: int):
    def app(message, context):
        if context.node_id == node and message.metadata.message_type == "query":
            raise RuntimeError("no data here")
        return client_app(message, context)
    return app


def test_a_node_failing_the_query_takes_no_part():
    from fedhet.flower.backend import DeploymentError

    config = small_config(["participation.name=full"], rounds=2)
    settings = AppSettings(config_text=build.config_text(config), round_timeout=0.5)
    # The config's process may sample any client: node 2's clients, hosted by nobody now, stop the run.
    with pytest.raises(DeploymentError, match=r"clients \[1, 3, 5\] \(3 in all\) are hosted by no"):
        run_server(LocalGrid(_query_fails_on(2), two_nodes(), settings.to_run_config()), settings)
    # participation = "nodes": the run goes on with node 1's clients only.
    settings = AppSettings(config_text=build.config_text(config), round_timeout=0.5, participation="nodes")
    grid = LocalGrid(_query_fails_on(2), two_nodes(), settings.to_run_config())
    result = run_server(grid, settings)
    assert list(result.hosts) == [1]
    assert result.participation.nonzero()[:, 1].unique().tolist() == [0, 2, 4]
    assert ("2", "train") not in {(str(node), kind) for node, kind in grid.sent}


class SlowNodeGrid(LocalGrid):
    """Node ``node`` trains round ``round_index`` (its ClientApp runs and keeps its clients' new state)
    but its reply comes after ``round-timeout``: the ServerApp never sees it in time."""

    def __init__(self, *args, node: int, round_index: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.node, self.round_index = node, round_index

    def push_messages(self, messages):
        messages = list(messages)
        ids = list(super().push_messages(messages))
        for message, message_id in zip(messages, ids):
            if message.metadata.message_type == "train" and message.metadata.dst_node_id == self.node and \
                    message.content.config_records[ROUND]["round"] == self.round_index:
                self.replies.pop(message_id, None)        # trained, but too late to count
        return ids


@pytest.mark.parametrize("method", ["scaffold", "fedspeed"])
def test_a_node_slower_than_round_timeout_keeps_its_clients_state(method):
    """issue 23 item 3: the late node's clients had already written their new state; it must not be
    kept, so the model equals the simulation in which they were absent that round."""
    config = small_config(METHODS[method], rounds=4)
    result, _ = run(config, lambda rc: SlowNodeGrid(client_app, two_nodes(), rc, node=2, round_index=1))
    late = result.hosts[2]
    assert [(f["round"], f["node"]) for f in result.failures] == [(2, 2)]
    assert not bool(result.participation[1, late].any()) and bool(result.participation[2:, late].any())
    params, log = simulate_with_arrivals(config, result.participation)
    assert torch.equal(log, result.participation)
    assert torch.equal(params, result.params), float((params - result.params).abs().max())


def test_a_server_too_large_for_the_machine_stops_before_any_node_is_asked(monkeypatch, tmp_path):
    """Finding R4 (2026-11-24): the ServerApp had no memory estimate (FedAWARE at N = 60000 died in a raw
    torch allocation); it now runs `fedhet run`'s check first, here against a machine with one byte free."""
    import fedhet.engine.resources as resources
    from fedhet.engine.resources import ResourceLimitError

    monkeypatch.setattr(resources, "available_memory", lambda path="/proc/meminfo": 1)
    asked = []

    class CountingGrid(LocalGrid):
        def get_node_ids(self):
            asked.append(True)
            return super().get_node_ids()

    config = small_config(METHODS["fedaware"], rounds=2)
    settings = AppSettings(config_text=build.config_text(config), round_timeout=0.5, result_dir=str(tmp_path / "r"))
    with pytest.raises(ResourceLimitError, match="needs more than the machine has"):
        run_server(CountingGrid(client_app, two_nodes(), settings.to_run_config()), settings)
    assert not asked
