"""``fedhet tune-claims`` end to end on a tiny Synthetic federation: stages (FedAU's two-stage search), the edge
rule, the results tables, resuming, and a choice that poisoned test labels leave unchanged."""
from __future__ import annotations

import dataclasses
import json

import pytest

import fedhet.components  # noqa: F401
from fedhet.cli import main
from fedhet.core.dataset import TensorDataset
from fedhet.core.registry import DATASETS
from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.preregistered import load_plan

BASE = """\
[run]
name = "tiny"
rounds = 4
eval_every = 1
global_train_loss_every = 4
checkpoint_every = 2

[data]
name = "synthetic"
num_devices = 6
max_device_size = 60
validation_fraction = 0.2

[partition]
name = "natural"
num_clients = 6

[model]
name = "logreg"

[participation]
name = "uniform"
clients_per_round = 3

[client]
name = "sgd"
batch_size = 16
steps = 3
"""
PROTOCOLS = """
[protocol.p]
base = "base.toml"
seeds = [1, 2, 3, 4, 5]
tuning_seed = 0
quick = { "run.rounds" = 2 }
[protocol.p.method.a]
lr_source = "pending: test"
client.learning_rate = 0.05
server.learning_rate = 3.0
[protocol.p.method.a_aware]
same_as = "p/a"
server.aware = true
"""
# Step sizes far too small for 4 rounds: the largest is best, so the edge rule extends the high end twice.
PLAN = """
max_extensions = 2
[knob.gamma]
key = "client.learning_rate"
values = [0.0001, 0.0002]
extend = true
[knob.eta]
key = "server.learning_rate"
values = [0.5, 1.0]
start = 1.0
extend = false
[search."p/a"]
criterion = "global_train_loss"
stages = [["gamma"], ["eta"]]
"""


@pytest.fixture
def plan(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "protocols.toml").write_text(PROTOCOLS)
    (tmp_path / "tuning.toml").write_text(PLAN)
    return tmp_path / "tuning.toml"


def _tune(plan, out, *extra):
    assert main(["tune-claims", "--plan", str(plan), "--out", str(out), *extra]) == 0
    return json.loads((out / "results.json").read_text())["searches"][0]


def test_stages_and_the_edge_rule(plan, tmp_path, capsys):
    result = _tune(plan, tmp_path / "out")
    stage1 = [p for p in result["points"] if p["stage"] == 1]
    stage2 = [p for p in result["points"] if p["stage"] == 2]
    # Stage 1: gamma's grid, then one point beyond the high end per extension (the grid's ratio, 2), at most 2.
    assert [p["values"]["client.learning_rate"] for p in stage1] == [0.0001, 0.0002, 0.0004, 0.0008]
    assert result["extensions"] == ["stage 1: gamma at its high end -> 0.0004", "stage 1: gamma at its high end -> 0.0008"]
    # The criterion is the global model's training loss at the horizon, and stage 1 chose its minimum.
    losses = [p["criterion"] for p in stage1]
    assert losses.index(min(losses)) == 3 and result["chosen"]["client.learning_rate"] == 0.0008
    # Stage 2 runs eta's grid (not extended: extend = false) at the chosen gamma; stage 1 ran at eta's start.
    assert all(set(p["values"]) == {"client.learning_rate"} for p in stage1)
    assert [p["values"] for p in stage2] == [{"client.learning_rate": 0.0008, "server.learning_rate": eta}
                                             for eta in (0.5, 1.0)]
    config = (tmp_path / "out" / "p" / "a" / "stage-1" / "trials" / "trial-0000" / "config.toml").read_text()
    assert "learning_rate = 1.0" in config.split("[server]")[1] and "seed = 0" in config
    config2 = (tmp_path / "out" / "p" / "a" / "stage-2" / "trials" / "trial-0000" / "config.toml").read_text()
    assert "learning_rate = 0.0008" in config2.split("[client]")[1].split("[")[0]
    assert result["chosen"]["server.learning_rate"] == stage2[min(range(2), key=lambda i: stage2[i]["criterion"])]["values"]["server.learning_rate"]
    # The tables: every grid point, and the chosen values as protocols.toml keys.
    table = (tmp_path / "out" / "results.md").read_text()
    rows = table.splitlines()
    assert sum(r.startswith("| 1 |") for r in rows) == 4 and sum(r.startswith("| 2 |") for r in rows) == 2
    assert "edge rule:" in table and "| 2 | 0.0008 | 1 | complete |" in table
    chosen = (tmp_path / "out" / "chosen.toml").read_text()
    assert "[protocol.p.method.a]" in chosen and "client.learning_rate = 0.0008" in chosen
    assert 'lr_source = "tuned: tune_claims.sh, global_train_loss@4, seed 0"' in chosen
    # Rerunning reads every finished trial back: the same results.
    assert _tune(plan, tmp_path / "out") == result


def test_poisoned_test_labels_leave_the_choice_unchanged(plan, tmp_path, monkeypatch):
    clean = _tune(plan, tmp_path / "clean")
    entry = DATASETS.get("synthetic")

    def poisoned(options, *, seed):
        bundle = entry.factory(options, seed=seed)
        return dataclasses.replace(bundle, test=TensorDataset(bundle.test.inputs, (bundle.test.targets + 1) % 10))

    monkeypatch.setitem(DATASETS._entries, "synthetic", dataclasses.replace(entry, factory=poisoned))
    dirty = _tune(plan, tmp_path / "poisoned")
    assert dirty["chosen"] == clean["chosen"] and dirty["extensions"] == clean["extensions"]
    assert [p["criterion"] for p in dirty["points"]] == [p["criterion"] for p in clean["points"]]
    assert ([p["test_accuracy (not used)"] for p in dirty["points"]]
            != [p["test_accuracy (not used)"] for p in clean["points"]])


def test_quick_tier_runs_the_quick_horizon_and_dry_run_lists(plan, tmp_path, capsys):
    result = _tune(plan, tmp_path / "quick", "--tier", "quick")
    assert result["horizon"] == 2 and result["tier"] == "quick"
    assert main(["tune-claims", "--plan", str(plan), "--dry-run"]) == 0
    assert "p/a: 4 trials before edge extensions" in capsys.readouterr().out


# Two tuning seeds and the stability rule. Protocol q trains an MLP (methods_from p).
STABILITY_PROTOCOLS = PROTOCOLS + """
[protocol.q]
base = "base.toml"
seeds = [1, 2, 3, 4, 5]
tuning_seed = 0
set = { "model.name" = "mlp" }
methods_from = "p"
"""
STABILITY_PLAN = """
max_extensions = 0
[knob.gamma]
key = "client.learning_rate"
values = [0.01, 0.03, 0.1, 0.3]
extend = false
[search."p/a"]
criterion = "global_train_loss_last10"
stages = [["gamma"]]
seeds = [0, 7]
record = { "run.global_train_loss_every" = 1 }
"""


def test_two_tuning_seeds_average_the_criterion_of_real_runs(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "protocols.toml").write_text(STABILITY_PROTOCOLS)
    (tmp_path / "plan.toml").write_text(STABILITY_PLAN)
    result = _tune(tmp_path / "plan.toml", tmp_path / "out")
    for point in result["points"]:
        assert sorted(point["per_seed"]) == ["0", "7"]
        assert point["criterion"] == pytest.approx(sum(point["per_seed"].values()) / 2)
    for seed in (0, 7):
        config = (tmp_path / "out" / "p" / "a" / "stage-1" / f"seed-{seed}" / "trials" / "trial-0000" / "config.toml")
        assert f"seed = {seed}" in config.read_text() and "global_train_loss_every = 1" in config.read_text()
    assert "seeds 0, 7 (the mean)" in (tmp_path / "out" / "results.md").read_text()


def test_the_stability_rule_on_a_made_up_grid(tmp_path, monkeypatch):
    """Made-up trials: p's criterion is best at 0.1, then 0.03, 0.3, 0.01; in q every step of 0.1 or more
    diverges on seed 7. The next steps of 0.1 (0.3), 0.03 (0.1) and 0.3 (0.9, the grid's ratio beyond its
    last value) fail in q, so 0.01 is chosen, checked from the best down."""
    from fedhet.lab.tuning import staged
    from fedhet.lab.tuning.results import COMPLETE, FAILED, TrialRecord

    loss = {0.01: 0.9, 0.03: 0.5, 0.1: 0.3, 0.3: 0.7, 0.9: 2.0}
    ran = []
    directories = []

    def trials(runner, criterion, knobs, grids, directory, jobs, log):
        seed, protocol = runner.sets["run.seed"], "q" if "stability/q" in str(directory) else "p"
        directories.append(directory)
        out = []
        for number, value in enumerate(grids[knobs[0].name]):
            ran.append((protocol, seed, value))
            diverged = protocol == "q" and seed == 7 and value >= 0.1
            out.append(TrialRecord(number, f"trial-{number:04d}", {knobs[0].key: value}, FAILED if diverged else COMPLETE,
                                   None if diverged else loss[value] + 0.01 * seed))
        return out

    monkeypatch.setattr(staged, "_stage_trials", trials)
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "protocols.toml").write_text(STABILITY_PROTOCOLS)
    (tmp_path / "free.toml").write_text(STABILITY_PLAN)
    (tmp_path / "stable.toml").write_text(STABILITY_PLAN + 'stability = ["q"]\n')
    free = _tune(tmp_path / "free.toml", tmp_path / "free")
    assert free["chosen"]["client.learning_rate"] == 0.1 and not free["stability"]
    ran.clear()
    stable = _tune(tmp_path / "stable.toml", tmp_path / "stable")
    assert stable["chosen"]["client.learning_rate"] == 0.01
    assert stable["stability"] == [
        "stage 1: gamma = 0.1: the next larger step 0.3 not eligible: it failed in q seed 7",
        "stage 1: gamma = 0.03: the next larger step 0.1 not eligible: it failed in q seed 7",
        "stage 1: gamma = 0.3: the next larger step 0.9 not eligible: it failed in q seed 7",
        "stage 1: gamma = 0.01: the next larger step 0.03 eligible"]
    # p's next steps were read from the grid; q's were run once per seed, only for the candidates checked
    assert sorted(r for r in ran if r[0] == "q") == [("q", s, v) for s in (0, 7) for v in (0.03, 0.1, 0.3, 0.9)]
    assert ("p", 0, 0.9) in ran and ("p", 7, 0.9) in ran        # beyond p's grid: run for the rule alone
    # each step checked has a search directory of its own (one directory holds one search space)
    checks = [d for d in directories if d.parent.parent.parent.name == "stage-1-stability"]
    assert len(set(checks)) == len(checks) == 10
    assert tmp_path / "stable" / "p" / "a" / "stage-1-stability" / "q" / "gamma-0.3" / "seed-7" in checks
    eligibility = {p["values"]["client.learning_rate"]: p["eligible"] for p in stable["points"]}
    assert eligibility == {0.01: True, 0.03: False, 0.1: False, 0.3: False}
    table = (tmp_path / "stable" / "results.md").read_text()
    assert "stability rule:" in table and "complete (next step unstable)" in table


def test_the_plan_refuses_a_stability_rule_it_cannot_apply(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "protocols.toml").write_text(STABILITY_PROTOCOLS)
    for text, message in [
            (STABILITY_PLAN + 'stability = ["nosuch"]\n', "stability protocol 'nosuch' has no method 'a'"),
            (STABILITY_PLAN.replace("seeds = [0, 7]", "seeds = [0, 3]"), "none of them an evaluation seed"),
            (STABILITY_PLAN.replace('"run.global_train_loss_every" = 1', '"client.steps" = 1'),
             "only keys that change what a trial records")]:
        (tmp_path / "plan.toml").write_text(text)
        with pytest.raises(TuneError, match=message):
            load_plan(tmp_path / "plan.toml")
