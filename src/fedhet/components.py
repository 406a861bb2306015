"""Imports every component module so that its registry decorators run.

Adding a component = one module plus one line here. An algorithm is one module of
:mod:`fedhet.algorithms` (one paper, one module: its options, client solver, server half and
registrations; docs/design.md "Adding an algorithm"). The order of these lines is the order of the
rows of the rule tables in docs/algorithms.md (docs/gen_algorithm_rules.py).
"""
# isort: off
import fedhet.data.datasets  # noqa: F401  (data.name)
import fedhet.data.paper_datasets  # noqa: F401
import fedhet.data.hf_disk  # noqa: F401  (data.name = "hf": a save_to_disk directory; datasets imported when used)
import fedhet.data.partition  # noqa: F401  (partition.name)
import fedhet.data.flower_partition  # noqa: F401  (partition.name = "flwr": Flower Datasets partitioners)
import fedhet.models  # noqa: F401  (model.name)
import fedhet.participation.uniform  # noqa: F401  (participation.name)
import fedhet.participation.bernoulli  # noqa: F401
import fedhet.participation.full  # noqa: F401
import fedhet.participation.heterogeneous  # noqa: F401
import fedhet.participation.trace  # noqa: F401
import fedhet.algorithms.fedavg  # noqa: F401  (client.name = "sgd", server.name, algorithm)
import fedhet.algorithms.fedprox  # noqa: F401  (client.name)
import fedhet.algorithms.scaffold  # noqa: F401  (client.name, server.name, algorithm)
import fedhet.algorithms.feddyn  # noqa: F401  (client.name, server.name, algorithm)
import fedhet.algorithms.fedcm  # noqa: F401  (client.name)
import fedhet.algorithms.fedadmm  # noqa: F401  (client.name, server.name, algorithm)
import fedhet.algorithms.fedsam  # noqa: F401  (client.name)
import fedhet.algorithms.fedspeed  # noqa: F401  (client.name, server.name, algorithm)
import fedhet.algorithms.fedavgm  # noqa: F401  (server.name)
import fedhet.algorithms.adaptive  # noqa: F401  (server.name: fedadagrad, fedadam, fedyogi)
import fedhet.algorithms.fedams  # noqa: F401  (server.name: fedams, fedamsgrad)
import fedhet.algorithms.fednova  # noqa: F401  (server.name, algorithm)
import fedhet.algorithms.fedaware  # noqa: F401  (server.name, algorithm)
import fedhet.algorithms.fedau  # noqa: F401  (server.name: fedau, average_participating, average_all, known_participation)
import fedhet.algorithms.fedvarp  # noqa: F401  (server.name)
import fedhet.algorithms.mifa  # noqa: F401  (server.name)
import fedhet.algorithms.fedmgda  # noqa: F401  (server.name: fedmgda_plus)
