"""Parsing of --param and --criterion, and the choice rule."""
import math

import pytest

from fedhet.errors import FedhetError
from fedhet.lab.tuning.criteria import Criterion, parse_criterion, select_best
from fedhet.lab.tuning.space import grid_points, parse_parameter


def test_value_lists_and_ranges():
    assert parse_parameter("client.mu=0.01, 0.1,1").values == (0.01, 0.1, 1)
    assert parse_parameter("client.variant=paper,released-code").values == ("paper", "released-code")
    log = parse_parameter("client.learning_rate=log:0.001:10:5")
    assert log.values == (0.001, 0.01, 0.1, 1.0, 10.0) and log.log and (log.low, log.high) == (0.001, 10.0)
    assert parse_parameter("server.learning_rate=lin:0.5:1.5:3").values == (0.5, 1.0, 1.5)


@pytest.mark.parametrize("text, message", [
    ("client.learning_rate", "KEY=SPEC"), ("learning_rate=0.1", "section.key"), ("run.seed=1,2", "set by the search"),
    ("client.mu=log:0:1:3", "LOW > 0"), ("client.mu=lin:2:1:3", "LOW < HIGH"), ("client.mu=0.1,0.1", "repeated"),
    ("client.mu=", "give values"),
])
def test_bad_parameters_are_one_line_errors(text, message):
    with pytest.raises(FedhetError, match=message):
        parse_parameter(text)


def test_grid_is_the_cross_product_first_key_slowest():
    space = [parse_parameter("client.learning_rate=0.1,1"), parse_parameter("client.epochs=1,2")]
    assert grid_points(space) == [{"client.learning_rate": 0.1, "client.epochs": 1},
                                  {"client.learning_rate": 0.1, "client.epochs": 2},
                                  {"client.learning_rate": 1, "client.epochs": 1},
                                  {"client.learning_rate": 1, "client.epochs": 2}]
    with pytest.raises(FedhetError, match="given twice"):
        grid_points(space + [parse_parameter("client.epochs=3")])


def test_criteria_and_their_values():
    assert parse_criterion("train_loss@20") == Criterion("train_loss", 20)
    assert parse_criterion("val_accuracy").maximize and not parse_criterion("val_loss@3").maximize
    for text in ("test_accuracy", "test_loss@5", "accuracy"):
        with pytest.raises(FedhetError, match="allowed: val_accuracy_last10, global_train_loss@ROUND"):
            parse_criterion(text)
    records = [{"round": 1, "train_loss": 2.0, "test_accuracy": 0.9}, {"round": 2, "train_loss": math.nan}]
    assert Criterion("train_loss", 1).value(records, rounds=2) == 2.0
    assert Criterion("train_loss").value(records, rounds=2) == math.inf       # a NaN loss is the worst
    assert Criterion("train_loss", 3).value(records, rounds=3) is None        # not reached


def test_windowed_validation_accuracy_is_the_mean_over_the_last_ten_percent_of_rounds():
    # 40 rounds, evaluated every 2: the window is rounds 37..40, i.e. the evaluated rounds 38 and 40.
    records = [{"round": r, "val_accuracy": r / 100, "test_accuracy": 1 - r / 100} for r in range(2, 41, 2)]
    criterion = parse_criterion("val_accuracy_last10")
    assert criterion.maximize and criterion.recorded == "val_accuracy"
    assert criterion.value(records, rounds=40) == pytest.approx((0.38 + 0.40) / 2, abs=1e-15)
    assert criterion.value(records[:-1], rounds=40) is None                     # stopped before the end
    with pytest.raises(FedhetError, match="without @ROUND"):
        parse_criterion("val_accuracy_last10@40")


def test_global_train_loss_is_read_at_its_round():
    records = [{"round": 5, "global_train_loss": 0.7, "train_loss": 0.1}, {"round": 10, "train_loss": 0.05}]
    assert parse_criterion("global_train_loss@5").value(records, rounds=10) == 0.7
    assert Criterion("global_train_loss", 10).value(records, rounds=10) is None


def test_select_best_uses_only_the_criterion_and_breaks_ties_by_trial_number():
    loss, accuracy = Criterion("val_loss"), Criterion("val_accuracy")
    assert select_best([(0, 0.5), (1, 0.2), (2, 0.2), (3, None), (4, math.nan)], loss) == 1
    assert select_best([(0, 0.5), (1, 0.7), (2, 0.7)], accuracy) == 1
    assert select_best([(0, None)], loss) is None
