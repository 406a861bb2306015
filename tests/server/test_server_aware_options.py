"""AwareOptions: one type for FedAWARE's direction settings, read from FedAWARE's options and from
any method's aware_* options by one converter."""
import dataclasses

import fedhet.components  # noqa: F401  (registers the components)
from fedhet.algorithms.fedaware import FedAwareOptions
from fedhet.server.aware import AwareProjection
from fedhet.server.aware_options import AwareOptions
from fedhet.server.base import ServerOptions


def _fields(cls):
    return {field.name: field for field in dataclasses.fields(cls)}


def test_fedaware_and_aware_fields_are_declared_from_aware_options():
    source, server, fedaware = _fields(AwareOptions), _fields(ServerOptions), _fields(FedAwareOptions)
    for name, field in source.items():
        for declared in (server[f"aware_{name}"], fedaware[name]):
            assert declared.default == field.default and declared.default_factory == field.default_factory, name
            bounds = {key: value for key, value in field.metadata.items() if key != "help"}
            assert {key: value for key, value in declared.metadata.items() if key != "help"} == bounds, name
            assert declared.metadata["help"].endswith(field.metadata["help"]), name


def test_one_converter_reads_either_set_of_fields():
    aware = ServerOptions(aware=True, aware_alpha=0.2, aware_normalize=False, aware_solver_tol=1e-6,
                          aware_solver_max_iter=7, aware_momentum_layers=("fc.weight",))
    fedaware = FedAwareOptions(alpha=0.2, normalize=False, solver_tol=1e-6, solver_max_iter=7,
                               momentum_layers=("fc.weight",), uniform_weights=True)
    expected = AwareOptions(alpha=0.2, normalize=False, solver_tol=1e-6, solver_max_iter=7,
                            momentum_layers=("fc.weight",))
    assert AwareOptions.read(aware, "aware_") == expected
    assert AwareOptions.read(fedaware) == expected


def test_the_aware_projection_is_tuned_by_the_aware_fields():
    settings = AwareProjection.from_options(ServerOptions(aware=True, aware_alpha=0.3,
                                                          aware_solver_max_iter=9)).direction.settings
    assert (settings.alpha, settings.solver_max_iter, settings.uniform_weights) == (0.3, 9, False)
    assert (settings.store_name, settings.option_prefix) == ("aware_momentum", "server.aware_")
