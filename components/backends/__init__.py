"""The serving backends, one module each, registered by the mode that selects them.

Every module of this package that defines a `ServingBackend` subclass is a backend; the registry
holds one of each, keyed by its `mode`. A new serving mode is a new module here plus its name in
`platform_config.profiles.AutoscalingMode` (the stack config's choices; a test holds the two
together).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import get_args

from platform_config.profiles import AutoscalingMode

from ..serving import Destination, PodShape, ServerObject, ServingBackend


def _subclasses(cls: type) -> list[type[ServingBackend]]:
    """Every concrete backend class, a backend built on another one included."""
    found: list[type[ServingBackend]] = []
    for sub in cls.__subclasses__():
        if not getattr(sub, "__abstractmethods__", None):
            found.append(sub)
        found += _subclasses(sub)
    return found


def _discover() -> dict[str, ServingBackend]:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")
    found: dict[str, ServingBackend] = {cls.mode: cls() for cls in _subclasses(ServingBackend)}
    return {mode: found[mode] for mode in get_args(AutoscalingMode) if mode in found}


BACKENDS: dict[str, ServingBackend] = _discover()

__all__ = ["BACKENDS", "Destination", "PodShape", "ServerObject", "ServingBackend"]
