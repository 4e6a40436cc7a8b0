"""The platform's typed stack configuration: models, catalog, checks and the loader."""

from .errors import ConfigError, ConfigIssue
from .loader import LoadedConfig, load_config, parse_platform_config
from .models import PROJECT, PlatformConfig

__all__ = ["PROJECT", "ConfigError", "ConfigIssue", "LoadedConfig", "PlatformConfig", "load_config", "parse_platform_config"]
