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

from ..shapes import Destination, PodShape, ServerObject, ServingBackend


def _subclasses(cls: type) -> list[type[ServingBackend]]:
    """Every concrete backend class, a backend built on another one included."""
    found: list[type[ServingBackend]] = []
    for sub in cls.__subclasses__():
        if not getattr(sub, "__abstractmethods__", None):
            found.append(sub)
        found += _subclasses(sub)
    return found


class RegistryError(Exception):
    """The backend modules and the stack config's modes disagree: a programming error."""


def registry(classes: list[type[ServingBackend]]) -> dict[str, ServingBackend]:
    """One backend per mode, in the order of `AutoscalingMode`. Every mode must have exactly one
    backend and every backend a mode the stack config offers: a second class for a mode would
    otherwise silently replace the first, and a mode without a backend would pass the config
    schema and fail only at preview."""
    modes = get_args(AutoscalingMode)
    found: dict[str, ServingBackend] = {}
    for cls in classes:
        mode: str = getattr(cls, "mode", "")
        if mode not in modes:
            raise RegistryError(f"backend {cls.__qualname__} has mode {mode!r}; AutoscalingMode offers {', '.join(modes)}")
        if mode in found:
            raise RegistryError(f"backends {type(found[mode]).__qualname__} and {cls.__qualname__} both claim mode {mode!r}")
        found[mode] = cls()
    missing = [mode for mode in modes if mode not in found]
    if missing:
        raise RegistryError(f"no backend for mode(s) {', '.join(missing)} of AutoscalingMode")
    return {mode: found[mode] for mode in modes}


def _discover() -> dict[str, ServingBackend]:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return registry(_subclasses(ServingBackend))


BACKENDS: dict[str, ServingBackend] = _discover()

__all__ = ["BACKENDS", "RegistryError", "registry", "Destination", "PodShape", "ServerObject", "ServingBackend"]
