"""Versions named in the MLflow model registry, resolved into pinned weights before anything else reads the config.

A version's source may be `mlflow: {model, alias}` or `{model, version}`. `resolve_registry` asks the tracking
server (`registry.trackingUri`, MLflow's REST API, plain `urllib`) which version each reference names and where its
weights are: the version's `registry.weightsTag` tag when it has one, else its source URI. Only a pinned location is
served: `hf://org/name@<40-character commit SHA>` (a Hugging Face repository at a commit) or `s3://bucket/prefix/<folder>`
(the last path segment is the version's subfolder, as `s3Uri` + `revision` in a stack file). The config comes back
with every `mlflow` source replaced by that concrete source, so the plan and the components never see a registry
reference, and with a `RegistryResolution` that says what each reference resolved to and where.

A preview may instead resolve from a recording (`registry-resolution.json`, written by a live preview) named by the
environment variable `INFERENCE_PLATFORM_REGISTRY_FILE`, so a pull request can be previewed offline; `pulumi up` refuses
one and always asks the registry.

The package: `client` (the live registry's REST API and its bounds), `recordings` (the recorded resolution and the lock
file, read and written), `resolution` (resolving a config from the answers), `entries` (what a reference resolved
to, which the three share).
"""

from .client import MAX_ANSWER_BYTES, REGISTRY_TOKEN_ENV, LiveRegistry, RegistryUnusable, in_clear
from .entries import MAX_QUOTE, RegistryEntry, describe_reference
from .recordings import (
    MAX_RECORDING_BYTES,
    PROJECT_DIR,
    RECORDING_FORMAT,
    RECORDING_FORMAT_VERSION,
    RECORDING_NAME,
    REGISTRY_FILE_ENV,
    RecordedEntry,
    RecordedRegistry,
    Recording,
    RegistryFileError,
    lock_differences,
    read_lock,
    read_recording,
    read_recording_of,
    recording,
)
from .resolution import (
    RegistryResolution,
    adapter_entry_name,
    adapter_registry_references,
    registry_references,
    resolve_registry,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "MAX_QUOTE",
    "MAX_RECORDING_BYTES",
    "PROJECT_DIR",
    "RECORDING_FORMAT",
    "RECORDING_FORMAT_VERSION",
    "RECORDING_NAME",
    "REGISTRY_FILE_ENV",
    "REGISTRY_TOKEN_ENV",
    "LiveRegistry",
    "RecordedEntry",
    "RecordedRegistry",
    "Recording",
    "RegistryEntry",
    "RegistryFileError",
    "RegistryResolution",
    "RegistryUnusable",
    "adapter_entry_name",
    "adapter_registry_references",
    "describe_reference",
    "in_clear",
    "lock_differences",
    "read_lock",
    "read_recording",
    "read_recording_of",
    "recording",
    "registry_references",
    "resolve_registry",
]
