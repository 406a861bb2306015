"""Registries: a name registered twice is refused unless replace=True (a notebook cell run again)."""
import pytest

from fedhet.core.registry import ALGORITHMS, NotAGradientStep, Registry, ServerRegistry, register_algorithm
from fedhet.error_lines import error_line
from fedhet.errors import FedhetError


def test_registering_twice_is_refused_with_the_way_out_named():
    registry = Registry("client")
    registry.register("mine", object)(lambda options: "first")
    with pytest.raises(ValueError, match="registered twice; pass replace=True"):
        registry.register("mine", object)(lambda options: "second")
    assert registry.get("mine").factory(None) == "first"


def test_replace_true_replaces_the_registration():
    registry = Registry("client")
    registry.register("mine", object)(lambda options: "first")
    registry.register("mine", object, replace=True)(lambda options: "second")
    assert registry.get("mine").factory(None) == "second" and registry.names() == ["mine"]


def test_an_algorithm_pair_can_be_replaced():
    try:
        register_algorithm("test_pair", client="sgd", server="fedavg")
        with pytest.raises(ValueError, match="replace=True"):
            register_algorithm("test_pair", client="sgd", server="fedavg")
        register_algorithm("test_pair", client="fedprox", server="fedavg", replace=True)
        assert ALGORITHMS["test_pair"].client == "fedprox"
    finally:
        ALGORITHMS.pop("test_pair", None)


def test_a_server_registered_without_its_gradient_step_declaration_is_refused_naming_it():
    registry = ServerRegistry("server")
    with pytest.raises(ValueError, match="server 'mine' registered without gradient_step") as refused:
        registry.register("mine", object)
    # The registering code's error (a user's --module too): one line on the command line, no traceback.
    assert isinstance(refused.value, FedhetError)
    line, _ = error_line(refused.value)
    assert line.startswith("fedhet: server 'mine' registered without gradient_step") and "internal error" not in line
    for wrong in (False, None, "not a step", 1):
        with pytest.raises(ValueError, match="server 'mine': gradient_step must be True"):
            registry.register("mine", object, gradient_step=wrong)
    with pytest.raises(ValueError, match="NotAGradientStep needs the reason"):
        NotAGradientStep("  ")
    assert "mine" not in registry


def test_the_declaration_says_why_a_method_is_not_a_gradient_step_for_its_options():
    registry = ServerRegistry("server")
    registry.register("step", object, gradient_step=True)(lambda options: None)
    registry.register("never", object, gradient_step=NotAGradientStep("it sets x"))(lambda options: None)
    registry.register("by_options", object, gradient_step=lambda options: True if options else NotAGradientStep("off"))(
        lambda options: None)
    registry.register("by_solver", object, client="sgd", client_options_cls=object,
                      gradient_step=lambda options, client: NotAGradientStep(f"solver {client}") if client else True)(
        lambda options, client: None)
    registry.register("wrong_rule", object, gradient_step=lambda options: False)(lambda options: None)
    assert registry.get("step").not_a_gradient_step(None) is None
    assert registry.get("never").not_a_gradient_step(None) == "it sets x"
    assert registry.get("by_options").not_a_gradient_step(1) is None
    assert registry.get("by_options").not_a_gradient_step(0) == "off"
    assert registry.get("by_solver").not_a_gradient_step(None, "dual") == "solver dual"
    assert registry.get("by_solver").not_a_gradient_step(None, "") is None
    with pytest.raises(ValueError, match="'wrong_rule': its gradient_step rule returned False"):
        registry.get("wrong_rule").not_a_gradient_step(None)


def test_only_server_methods_declare_a_gradient_step():
    registry = Registry("client")
    registry.register("mine", object)(lambda options: None)
    with pytest.raises(ValueError, match="declares no gradient_step"):
        registry.get("mine").not_a_gradient_step(None)


def test_every_registered_server_method_declares_a_gradient_step():
    import fedhet.components  # noqa: F401  (registers every component)
    from fedhet.core.registry import SERVERS
    assert SERVERS.names() and all(SERVERS.get(name).gradient_step is not None for name in SERVERS.names())
