"""``same_as`` (fedhet.lab.claims.same_as): a paired arm is its reference plus its own added keys."""
import pytest

from fedhet.lab.claims.same_as import SameAsError, resolve_same_as

RAW = {
    "p/fedavg": {"lr_source": "pending: tune", "server": {"name": "fedavg", "learning_rate": 2.0},
                 "full": {"client.lr_decay": 0.998}},
    "p/fedavg_aware": {"same_as": "p/fedavg", "server": {"aware": True}},
    "q/fedavg": {"same_as": "p/fedavg_aware", "client.epochs": 3},
}


def test_an_arm_takes_every_value_tier_table_and_lr_source_of_its_reference():
    resolved = resolve_same_as(RAW)
    assert resolved["p/fedavg"] == {"server.name": "fedavg", "server.learning_rate": 2.0, "lr_source": "pending: tune",
                                    "full": {"client.lr_decay": 0.998}}
    assert resolved["p/fedavg_aware"] == {"server.name": "fedavg", "server.learning_rate": 2.0, "server.aware": True,
                                          "full": {"client.lr_decay": 0.998}, "same_as": "p/fedavg",
                                          "lr_source": "pending: tune (same_as p/fedavg)"}
    # Chains are followed: q/fedavg has p/fedavg's values, p/fedavg_aware's addition and its own.
    chained = resolved["q/fedavg"]
    assert chained["server.learning_rate"] == 2.0 and chained["server.aware"] is True and chained["client.epochs"] == 3
    assert chained["lr_source"].startswith("pending: tune")


@pytest.mark.parametrize("change, message", [
    ({"p/fedavg_aware": {"same_as": "p/fedavg", "server.learning_rate": 4.0}},
     "same_as = 'p/fedavg' but it changes server.learning_rate (server.learning_rate = 2.0 there)"),
    ({"p/fedavg_aware": {"same_as": "p/fedavg", "full": {"client.lr_decay": 0.99}}}, "changes client.lr_decay"),
    ({"p/fedavg_aware": {"same_as": "p/nothing"}}, "same_as = 'p/nothing': no such method"),
    ({"p/fedavg_aware": {"same_as": "fedavg"}}, 'write "protocol/method"'),
    ({"p/fedavg": {"same_as": "q/fedavg"}}, "refers back to itself"),
])
def test_bad_references_and_changed_values_are_refused(change, message):
    with pytest.raises(SameAsError) as error:
        resolve_same_as({**RAW, **change})
    assert message in str(error.value) and isinstance(error.value, ValueError)


def test_an_arm_may_change_only_the_keys_it_declares_tuned():
    raw = {**RAW, "p/fedavg_aware": {"same_as": "p/fedavg", "tuned": ["server.learning_rate"],
                                     "lr_source": "pending: its own search", "server": {"aware": True,
                                                                                       "learning_rate": 4.0}}}
    arm = resolve_same_as(raw)["p/fedavg_aware"]
    assert arm["server.learning_rate"] == 4.0 and arm["server.name"] == "fedavg"
    assert arm["tuned"] == ["server.learning_rate"] and arm["lr_source"] == "pending: its own search"
    assert arm["full"] == {"client.lr_decay": 0.998}            # everything else is still the reference's
    changed = {**raw, "p/fedavg_aware": {**raw["p/fedavg_aware"], "full": {"client.lr_decay": 0.99}}}
    with pytest.raises(SameAsError, match="changes client.lr_decay"):
        resolve_same_as(changed)


@pytest.mark.parametrize("arm, message", [
    ({"same_as": "p/fedavg", "tuned": ["server.learning_rate"]}, "gives its own lr_source"),
    ({"same_as": "p/fedavg", "tuned": "server.learning_rate", "lr_source": "pending: x"}, "a list of dotted"),
    ({"tuned": ["server.learning_rate"], "lr_source": "pending: x"}, "this method has no same_as"),
])
def test_tuned_keys_are_declared_properly(arm, message):
    with pytest.raises(SameAsError, match=message):
        resolve_same_as({**RAW, "p/fedavg_aware": arm})
