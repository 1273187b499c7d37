"""The mechanism registry: name → class (mechanisms/README.md §1 summary table).

Adding a mechanism is one file with a small class, one :func:`register_mechanism` call here, and
its tests. :func:`register_mechanism` refuses to overwrite a name unless ``force=True``.
"""

from __future__ import annotations

from ..errors import InvalidParameterError, ParameterTypeError, UnknownMechanismError
from .base import AdditiveMechanism, Mechanism, SelectionMechanism
from .dp_mlm import DpMlm
from .gaussian import Gaussian
from .laplace import Laplace
from .madlib import Madlib
from .mahalanobis import Mahalanobis
from .privemb import Privemb
from .santext import Santext
from .santext_plus import SantextPlus
from .tem import Tem
from .truncated_laplace import TruncatedLaplace


__all__ = [
    "Mechanism",
    "AdditiveMechanism",
    "SelectionMechanism",
    "register_mechanism",
    "unregister_mechanism",
    "get_mechanism_class",
    "list_mechanisms",
]

_REGISTRY: dict[str, type[Mechanism]] = {}


def register_mechanism(name: str, cls: type[Mechanism], *, force: bool = False) -> None:
    """Register ``cls`` under ``name``; an existing name raises unless ``force=True``."""
    if not isinstance(cls, type) or not issubclass(cls, Mechanism):
        raise ParameterTypeError(f"cls must be a Mechanism subclass, got {cls!r}.")
    if name in _REGISTRY and not force:
        raise InvalidParameterError(
            f"mechanism {name!r} is already registered ({_REGISTRY[name].__name__}); pass force=True to replace it."
        )
    _REGISTRY[name] = cls


def unregister_mechanism(name: str) -> None:
    _REGISTRY.pop(name, None)


def list_mechanisms() -> list[str]:
    return sorted(_REGISTRY)


def get_mechanism_class(name: str) -> type[Mechanism]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownMechanismError(
            f"Unknown mechanism {name!r}. Registered mechanisms: {list_mechanisms()}."
        ) from None


def _register_builtins() -> None:
    for cls in (Madlib, Privemb, Laplace, Gaussian, TruncatedLaplace, Tem, Santext, SantextPlus, Mahalanobis, DpMlm):
        register_mechanism(cls.name, cls)


_register_builtins()
