"""Components from user code: a ``replace=True`` of a built-in works in a fresh process, a run made
with one is never resumed with another implementation of its name, and a user module's failures
(at import, or a wrong shape returned) are one-line errors naming it, not bugs in fedhet."""
from __future__ import annotations

import dataclasses
import textwrap

import pytest

from fedhet.client.base import LocalSolver
from fedhet.core.component_output import ComponentOutputError
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.engine.fingerprint import ConfigChangedError
from fedhet.engine.runner import resume_run, run_experiment
from fedhet.error_lines import error_line
from fedhet.errors import FedhetError
from fedhet.server.base import NoState, SGDOptimizer
from fedhet.server.methods import server_method
from fedhet.testing import check_server, check_solver, import_user_modules
from helpers_reliability import fedhet_cli

REPLACE_FEDAVG = textwrap.dedent("""
    from fedhet.core.registry import SERVERS
    from fedhet.server.averaging import AverageParticipatingAggregator
    from fedhet.server.base import ServerOptions, SGDOptimizer
    from fedhet.server.methods import server_method

    @SERVERS.register("fedavg", ServerOptions, gradient_step=True, replace=True)
    def make_my_fedavg(options):
        \"\"\"FedAvg, registered by a user module over the built-in.\"\"\"
        return server_method(AverageParticipatingAggregator(), SGDOptimizer(options.learning_rate), options)
""")


def test_a_replace_of_a_builtin_in_a_fresh_process_replaces_it(tmp_path):
    module = tmp_path / "replace_fedavg.py"
    module.write_text(REPLACE_FEDAVG)
    result = fedhet_cli("check", "server", "fedavg", "--module", str(module), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "registered twice" not in result.stderr and "kill and resume" in result.stdout


def test_a_replace_registered_before_fedhets_components_outlives_the_builtins_registration(tmp_path):
    import subprocess
    import sys

    from helpers_reliability import subprocess_env

    (tmp_path / "replace_fedavg.py").write_text(REPLACE_FEDAVG)
    script = ("import sys; sys.path.insert(0, sys.argv[1])\n"
              "import replace_fedavg\n"                      # before fedhet.components: a fresh process
              "assert 'fedhet.components' not in sys.modules\n"
              "import fedhet.components\n"
              "from fedhet.core.registry import SERVERS\n"
              "print(SERVERS.get('fedavg').factory.__module__)\n")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                            env=subprocess_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "replace_fedavg"


@pytest.mark.parametrize("body,expected", [
    ("raise RuntimeError('no GPU here')", r"importing it failed \(.*line 1\): RuntimeError: no GPU here"),
    ("def broken(:\n    pass", r"importing it failed \(line 1\): SyntaxError"),
    ("import sys\nsys.exit(0)", r"called sys.exit\(0\) while being imported.*nothing was checked"),
    ("import not_a_module_anywhere_xyz", r"importing it failed .*ModuleNotFoundError"),
])
def test_a_module_failing_or_exiting_at_import_is_one_line_naming_it(tmp_path, body, expected):
    module = tmp_path / "bad_module.py"
    module.write_text(body + "\n")
    with pytest.raises(FedhetError, match=expected) as caught:
        import_user_modules([str(module)])
    line, status = error_line(caught.value)
    assert status == 2 and line.startswith(f"fedhet: --module {module}") and "\n" not in line


def test_a_module_calling_sys_exit_makes_check_fail_not_pass(tmp_path):
    module = tmp_path / "exit_import.py"
    module.write_text("import sys\nsys.exit(0)\n")
    result = fedhet_cli("check", "solver", "sgd", "--module", str(module))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and "sys.exit(0)" in result.stderr


class _WrongShape:
    """An aggregator returning ``make(G)`` instead of G."""

    def __init__(self, make):
        self.make = make

    def init(self, params, context):
        return NoState()

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        return self.make(-cohort.deltas), state, {}


class _WrongDirection(LocalSolver):
    def __init__(self, options, make):
        super().__init__(options)
        self.make = make

    def direction(self, w, x, grad_fn, local):
        loss, grad = self.gradient(w, grad_fn)
        return loss, self.make(grad)


@pytest.fixture
def scratch_registries(monkeypatch):
    """Registrations made by a test are undone after it."""
    monkeypatch.setattr(SERVERS, "_entries", dict(SERVERS._entries))
    monkeypatch.setattr(CLIENT_SOLVERS, "_entries", dict(CLIENT_SOLVERS._entries))


@pytest.mark.parametrize("make,returned", [
    (lambda g: g.mean(dim=0)[:-3], "a tensor of shape [607]"),
    (lambda g: g.mean(dim=0).tolist(), "a list"),
    (lambda g: g, "a tensor of shape [4, 610]"),
])
def test_a_user_aggregator_of_the_wrong_shape_is_blamed_on_it(scratch_registries, make, returned):
    base = SERVERS.get("fedavg")

    @SERVERS.register("wrong_shape_server", base.options_cls, gradient_step=True)
    def make_wrong(options):
        return server_method(_WrongShape(make), SGDOptimizer(options.learning_rate), options)

    with pytest.raises(ComponentOutputError) as caught:
        check_server("wrong_shape_server")
    line, status = error_line(caught.value)
    assert status == 2 and f"_WrongShape (module {__name__}): aggregate returned {returned}" in line
    assert "expected a tensor of shape [610]" in line and "internal error" not in line


@pytest.mark.parametrize("make,returned", [(lambda g: g[..., :-1], "a tensor of shape"), (lambda g: None, "None")])
def test_a_user_direction_of_the_wrong_shape_is_blamed_on_it(scratch_registries, make, returned):
    sgd = CLIENT_SOLVERS.get("sgd")

    @CLIENT_SOLVERS.register("wrong_direction", sgd.options_cls)
    def make_wrong(options):
        return _WrongDirection(options, make)

    with pytest.raises(ComponentOutputError, match=f"_WrongDirection .*direction returned {returned}") as caught:
        check_solver("wrong_direction")
    assert error_line(caught.value)[1] == 2


def test_a_run_made_with_a_replaced_builtin_is_not_resumed_with_the_builtin(small_config, tmp_path, scratch_registries):
    builtin = SERVERS.get("fedavg")

    def user_fedavg(options):
        return builtin.factory(options)

    SERVERS._entries["fedavg"] = dataclasses.replace(builtin, factory=user_fedavg)
    run_experiment(small_config("run.rounds=2", "run.name=replaced"))
    SERVERS._entries["fedavg"] = builtin          # a fresh process: the user's module not imported
    with pytest.raises(ConfigChangedError, match="server.name = 'fedavg' was .*user_fedavg when the run started, "
                                                 "and here it is fedhet's built-in") as caught:
        resume_run(tmp_path / "replaced", sets=["run.rounds=4"])
    assert error_line(caught.value)[1] == 2
    SERVERS._entries["fedavg"] = dataclasses.replace(builtin, factory=user_fedavg)
    assert resume_run(tmp_path / "replaced", sets=["run.rounds=4"])["rounds"] == 4   # the same implementation


def test_a_builtin_run_is_not_resumed_with_a_users_replacement(small_config, tmp_path, scratch_registries):
    builtin = SERVERS.get("fedavg")
    run_experiment(small_config("run.rounds=2", "run.name=plain"))

    def user_fedavg(options):
        return builtin.factory(options)

    SERVERS._entries["fedavg"] = dataclasses.replace(builtin, factory=user_fedavg)
    with pytest.raises(ConfigChangedError, match="was fedhet's built-in when the run started"):
        resume_run(tmp_path / "plain", sets=["run.rounds=4"])
