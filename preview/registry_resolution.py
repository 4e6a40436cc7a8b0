"""How the program resolves the stack's MLflow registry versions under the preview: from the lock file the stack
names (`registry.lockFile`), from a recording named in its environment, or live, with the registry's token from the
preview's environment; a live resolution is recorded for `--registry-file`."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

from platform_config.models import LOCK_FILE_PATTERN, PROJECT, REGISTRY_TOKEN
from platform_config.registry import RECORDING_NAME, REGISTRY_TOKEN_ENV, recording

from .stack_config import StackConfig


def committed_lock(project_dir: Path, stack_config: StackConfig) -> Path | None:
    """The lock file the stack names (`registry.lockFile`): what `pulumi up` may deploy, and what an offline preview
    resolves the registry's versions from. None when it names none (or names something the program will refuse)."""
    try:
        registry = json.loads(stack_config.values.get(f"{PROJECT}:registry", "null"))
    except ValueError:
        return None
    lock = registry.get("lockFile") if isinstance(registry, dict) else None
    if not isinstance(lock, str) or not LOCK_FILE_PATTERN.fullmatch(lock) or not (project_dir / lock).is_file():
        return None
    return (project_dir / lock).resolve()


def program_config(stack_config: StackConfig) -> StackConfig:
    """The config the program gets: the stack's, with the registry token from the environment when the stack
    declares one (still a secret)."""
    key = f"{PROJECT}:{REGISTRY_TOKEN}"
    token = os.environ.get(REGISTRY_TOKEN_ENV)
    if key not in stack_config.secret_keys:
        return stack_config
    if not token:
        print(
            f"note: {key} is a secret this preview cannot decrypt: set {REGISTRY_TOKEN_ENV} to send the registry the token",
            file=sys.stderr,
        )
        return stack_config
    return dataclasses.replace(stack_config, values={**stack_config.values, key: token})


class ProgramEnvironment:
    """The environment variables the program reads, set while it runs in this process and restored after."""

    def __init__(self, variables: dict[str, str]):
        self.variables = variables
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for name, value in self.variables.items():
            self.saved[name] = os.environ.get(name)
            os.environ[name] = value

    def __exit__(self, *exc: object) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def write_recording(out: Path, registry: Any) -> bool:
    """A live resolution, recorded for `--registry-file` (an offline preview of the same registry state)."""
    if not isinstance(registry, dict) or registry.get("resolvedFrom") != "live":
        return False
    recorded_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    (out / RECORDING_NAME).write_text(json.dumps(recording(registry, recorded_at), indent=2) + "\n")
    return True
