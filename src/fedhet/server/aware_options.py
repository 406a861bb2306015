"""The settings of FedAWARE's direction ``d``, one type for FedAWARE and for the AWARE extension.

FedAWARE (``server.name = "fedaware"``) reads them from its own options (``server.alpha``, ...);
the AWARE extension of any gradient-step method (``server.aware = true``) from the ``aware_*``
options every method has (``server.aware_alpha``, ...). Both sets of fields are declared from
:class:`AwareOptions` (:func:`aware_field`), so the defaults, bounds and help exist once, and
:meth:`AwareOptions.read` is the one converter (a field-name prefix tells the two apart).
docs/algorithms.md section 3.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from fedhet.core.options import option

# The server.kernel choices of every server part that keeps per-client tables (FedAWARE's and
# AWARE's direction here, FedVarp's and MIFA's table in fedhet.server.latest_updates): "fast" is the
# blocked, threaded or incremental code, "reference" the plain dense torch beside it in the paper's
# notation (as torch.optim keeps _single_tensor_adam beside _multi_tensor_adam);
# tests/algorithms/test_reference_kernels.py runs every such method on both. Declared here, beside
# the first options that use it, because server.base imports this module and nothing else.
KERNELS = ("fast", "reference")


def kernel_option() -> Any:
    """The ``kernel`` option (:data:`KERNELS`) of a server part that keeps per-client tables."""
    return option("fast", choices=KERNELS,
                  help="server kernel: fast (blocked, threaded, incremental) or reference (the plain dense "
                       "torch beside it, in the paper's notation; slower, for checking)")


@dataclasses.dataclass(frozen=True)
class AwareOptions:
    """How FedAWARE's per-client momenta and direction ``d`` are computed."""

    alpha: float = option(0.5, gt=0, le=1, symbol="alpha",
                          help="momentum weight of the new update: m_i <- (1 - alpha) m_i + alpha g_i "
                               "(AISTATS Eq. 3); 0.5 in the papers, 0.3 in the authors' MNIST/FMNIST scripts")
    normalize: bool = option(True, help="unit-normalise every momentum before the min-norm solve and step along "
                                        "sum lambda_i m_i/||m_i|| (the authors' released code); false = the "
                                        "papers' Eq. (2) on raw momenta (much smaller steps)")
    solver_tol: float = option(1e-8, ge=0, help="relative Frank-Wolfe duality-gap tolerance of the min-norm solve")
    solver_max_iter: int = option(10000, ge=1, help="iteration cap of the min-norm solve")
    momentum_layers: tuple[str, ...] = option(
        default_factory=tuple,
        help="parameter names whose coordinates the momenta keep (empty = all): lambda comes from these "
             "coordinates and d uses it there; the other coordinates step along the FedAvg aggregate")
    kernel: str = kernel_option()

    @classmethod
    def read(cls, options: Any, prefix: str = "") -> "AwareOptions":
        """The settings held by ``options`` under field names ``prefix + name`` (``""`` for
        FedAWARE's options, ``"aware_"`` for any method's AWARE extension)."""
        return cls(**{f.name: _plain(getattr(options, prefix + f.name)) for f in dataclasses.fields(cls)})


def _plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def aware_field(name: str, *, help_prefix: str = "") -> Any:
    """A dataclass field with the default, bounds and help of ``AwareOptions.<name>`` (help text
    prefixed by ``help_prefix``), to declare these settings in another options class."""
    source = {f.name: f for f in dataclasses.fields(AwareOptions)}[name]
    metadata = dict(source.metadata)
    metadata["help"] = help_prefix + metadata["help"]
    if source.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=source.default_factory, metadata=metadata)
    return dataclasses.field(default=source.default, metadata=metadata)
