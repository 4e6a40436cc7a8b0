"""The MLflow model registry: the reference a version's source makes to it, the tracking server and its lock file,
and the aliases the deploy moves there."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, model_validator

from .base import ConfigModel, PositiveInt, _full_match

# MLflow's own rule for an alias (mlflow/utils/validation.py `_validate_model_alias_name` at
# v3.17.2): letters, digits, '_' and '-'; never `latest` in any case (`_validate_model_alias_name_reserved`
# compares it lower-cased) nor `v<digits>`, which name versions.
_MLFLOW_ALIAS = re.compile(r"(?!(?i:latest)$)(?![vV]\d+$)[A-Za-z0-9_-]{1,255}")
# Where a lock file lives: a .json file in the stack files' folder, named relative to the project.
LOCK_FILE_PATTERN = re.compile(r"stacks/(?!\.)[A-Za-z0-9_.-]+\.json")
_ALIAS_MESSAGE = "is not an MLflow alias: letters, digits, '_' and '-' (not 'latest' or 'v<n>')"


class MlflowReference(ConfigModel):
    """A version in the MLflow model registry, resolved at preview and at `pulumi up`."""

    # MLflow 3.17.2 refuses '/' and ':' in a registered model's name (mlflow/utils/validation.py
    # _validate_model_name); here printable ASCII too: the name reaches the registry's query strings and the pods'
    # annotations.
    model: Annotated[
        str,
        _full_match(r"[ -.0-9;-~]{1,256}", "is not a registered model name: 1-256 printable ASCII characters, no '/' or ':'"),
    ]
    """The registered model's name."""
    alias: Annotated[str, _full_match(_MLFLOW_ALIAS, _ALIAS_MESSAGE)] | None = None
    """An alias of the registered model (e.g. `champion`): served is the version it points at when the stack is
    previewed or deployed."""
    version: PositiveInt | None = None
    """A version number of the registered model."""

    @model_validator(mode="after")
    def _alias_or_version(self) -> MlflowReference:
        if (self.alias is None) == (self.version is None):
            raise ValueError("give exactly one of 'alias' (e.g. champion) or 'version' (a version number)")
        return self


class ServingAliases(ConfigModel):
    """The aliases that say in the registry what this environment serves, moved by `python -m platform_tools aliases`
    after each `pulumi up` (deploy.yml) from the stack's `canaryReleases` and `modelRegistry` outputs: a promotion or a
    rollback, once deployed, shows in the registry. Written by the platform, never read by it: no version or adapter
    source may name them. MLflow's stages, which once played this part, are deprecated since 2.9.0
    (mlflow/tracking/client.py at v3.17.2)."""

    stable: Annotated[str, _full_match(_MLFLOW_ALIAS, _ALIAS_MESSAGE)]
    """The alias on the registry version each model serves as its stable version, e.g. `staging` or `production`."""
    canary: Annotated[str, _full_match(_MLFLOW_ALIAS, _ALIAS_MESSAGE)]
    """The alias on the registry version a model's canary serves while its weight is above 0, e.g. `staging-canary`;
    removed when no canary takes traffic (a rollback to weight 0, or a promotion to stable)."""

    @model_validator(mode="after")
    def _two_aliases(self) -> ServingAliases:
        if self.stable == self.canary:
            raise ValueError(f"stable and canary are both {self.stable!r}: the canary's alias would take the stable one's")
        return self


class RegistryConfig(ConfigModel):
    """The MLflow tracking server whose model registry names the versions; its token, if it needs one, is the
    secret `registryToken` (`pulumi config set --secret registryToken ...`), sent as a bearer token. A live preview
    records what it resolved as `registry-resolution.json` in its output folder; `python -m preview --registry-file
    <that file>` (or the environment variable `INFERENCE_PLATFORM_REGISTRY_FILE`) previews from it without the
    registry. `pulumi up` always asks the registry, and deploys only what `lockFile` holds when it is set."""

    tracking_uri: (
        Annotated[
            str,
            _full_match(
                r"https?://[A-Za-z0-9._:\[\]-]{1,261}(/[!\"$->@-~]{0,2048})?",
                "is not an http(s) URL without query, fragment or credentials (ASCII, at most 2048 characters of path)",
            ),
        ]
        | None
    ) = None
    """The tracking server's URL, e.g. `https://mlflow.example.com`; required when a version names an `mlflow`
    source."""
    timeout_seconds: Annotated[int, Field(ge=1, le=60)] = 10
    """How long one registry request may take before the preview stops with an error."""
    # A model version tag's key as MLflow 3.17.2 takes one (mlflow/utils/validation.py: _validate_tag_name's
    # `[/\w.\- :]`, in ASCII here, and MAX_MODEL_REGISTRY_TAG_KEY_LENGTH, 250).
    weights_tag: Annotated[
        str, _full_match(r"[A-Za-z0-9_/. :-]{1,250}", "is not an MLflow tag key: letters, digits and '_/. :-', at most 250")
    ] = "weights"
    """A model-version tag that names the weights (`hf://org/name@<commit SHA>` or `s3://...`) when the version's
    source URI does not (e.g. an MLflow `runs:/` or `models:/` URI)."""
    lock_file: (
        Annotated[
            str,
            _full_match(
                LOCK_FILE_PATTERN,
                "is not a .json file in the stack files' folder, such as stacks/Pulumi.prod.registry.json (a committed "
                "file beside the stack file, never a preview's output)",
                max_length=512,
            ),
        ]
        | None
    ) = None
    """The registry versions this stack may deploy: a live preview's `registry-resolution.json`, committed beside the
    stack file (`stacks/`, e.g. `stacks/Pulumi.prod.registry.json`). `pulumi up` resolves live and stops,
    naming the version's key, when the registry answers anything the file does not hold (a moved alias, a reference
    it lacks), so a new registry version reaches the stack only through a reviewed change of this file. A preview
    resolves from this file (what `pulumi up` may deploy); `--registry-live` asks the registry instead and shows each
    difference in its report and fails. Required in production when a version or adapter names an
    `mlflow` source."""
    serving_aliases: ServingAliases | None = None
    """The aliases the deploy moves so the registry shows what this environment serves (none: the registry is only
    read)."""
