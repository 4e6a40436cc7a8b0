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
"""

from __future__ import annotations

import json
import re
import stat
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import pulumi
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from .adapters import module_name
from .errors import ConfigError, ConfigIssue
from .models import REGISTRY_TOKEN, S3_URI_PATTERN, MlflowReference, ModelSource, PlatformConfig, RegistryConfig

# Names a recorded resolution for the program to use instead of the live registry (previews only).
REGISTRY_FILE_ENV = "INFERENCE_PLATFORM_REGISTRY_FILE"
# The registry token where the secret `registryToken` cannot be read (the offline preview, the aliases tool): a stack's
# secure value is a placeholder there (no passphrase, no KMS).
REGISTRY_TOKEN_ENV = "INFERENCE_PLATFORM_REGISTRY_TOKEN"
# What a live preview writes into its output folder, for `--registry-file` later.
RECORDING_NAME = "registry-resolution.json"
RECORDING_FORMAT = "inference-platform/registry-resolution"
RECORDING_FORMAT_VERSION = 1
# A model version is a few KiB of JSON; a larger answer is not one (a hostile or broken server).
MAX_ANSWER_BYTES = 1 << 20
MAX_RECORDING_BYTES = 4 << 20
# Registry answers quoted in an error message are cut to this many characters.
MAX_QUOTE = 300

_HF_PINNED = re.compile(r"hf://(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)@(?P<revision>[0-9a-f]{40})")
_S3 = re.compile(S3_URI_PATTERN.removeprefix("^").removesuffix("$"))
PINNED_FORMS = "hf://org/name@<40-character commit SHA> or s3://bucket/prefix/<version folder>"


class RegistryFileError(pulumi.RunError):
    """A recorded resolution that cannot be used: the CLI and the preview print the message and exit 2."""


@dataclass(frozen=True)
class RegistryEntry:
    """What one registry reference resolved to."""

    registered_model: str
    # The reference as the stack gives it: an alias or a version number.
    alias: str | None
    requested_version: int | None
    # The version the registry named (for a version reference, the same number).
    registry_version: str
    weights: str

    @property
    def reference(self) -> tuple[str, str | None, int | None]:
        return (self.registered_model, self.alias, self.requested_version)

    def to_json(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"alias": self.alias} if self.alias is not None else {"version": self.requested_version}
        return {
            "registeredModel": self.registered_model,
            **asked,
            "registryVersion": self.registry_version,
            "weights": self.weights,
        }


def _reference_of(reference: MlflowReference) -> tuple[str, str | None, int | None]:
    return (reference.model, reference.alias, reference.version)


def describe_reference(reference: MlflowReference) -> str:
    asked = f"alias {reference.alias!r}" if reference.alias is not None else f"version {reference.version}"
    return f"registered model {reference.model!r}, {asked}"


@dataclass(frozen=True)
class RegistryResolution:
    """Where the stack's registry references were resolved, and to what: per (model, version name)."""

    origin: Literal["live", "recorded"]
    tracking_uri: str
    versions: dict[tuple[str, str], RegistryEntry] = field(default_factory=dict)
    # A recorded resolution: its file and when the live preview that wrote it resolved.
    recording_file: str | None = None
    recorded_at: str | None = None
    # `registry.lockFile`, and what a preview resolved that it does not hold (`pulumi up` stops on any).
    lock_file: str | None = None
    lock_differences: tuple[str, ...] = ()

    def entry(self, model: str, version: str) -> RegistryEntry | None:
        return self.versions.get((model, version))

    def stack_output(self, config: PlatformConfig) -> dict[str, Any]:
        """The `modelRegistry` stack output: per model and version, the registered model, the alias or version the
        stack names and the registry version it resolved to, and the weights; versions pinned in the stack file say
        so. No resolution time: an unchanged registry must leave the outputs unchanged."""
        origin: dict[str, Any] = {"resolvedFrom": self.origin, "trackingUri": self.tracking_uri}
        if self.origin == "recorded":
            origin.update(recordingFile=self.recording_file, recordedAt=self.recorded_at)
        if self.lock_file is not None:
            origin.update(lockFile=self.lock_file, lockDifferences=list(self.lock_differences))
        models = {
            model.name: {
                **{
                    version.name: {"source": "registry", **entry.to_json()}
                    if (entry := self.entry(model.name, version.name)) is not None
                    else {"source": "stack file"}
                    for version in model.versions
                },
                # Its adapters' revisions, by module name (`<adapter>@<revision>`: never a version's name).
                **{
                    name: {"source": "registry", **entry.to_json()}
                    if (entry := self.entry(model.name, name)) is not None
                    else {"source": "stack file"}
                    for name in _adapter_entry_names(config, m_index)
                },
            }
            for m_index, model in enumerate(config.models)
        }
        return {**origin, "models": models}


def _adapter_entry_names(config: PlatformConfig, m_index: int) -> list[str]:
    model = config.models[m_index]
    return [
        adapter_entry_name(config, m_index, a_index, v_index)
        for a_index, adapter in enumerate(model.adapters)
        for v_index in ([None] if adapter.versions is None else range(len(adapter.versions)))
    ]


def registry_references(config: PlatformConfig) -> list[tuple[int, int, MlflowReference]]:
    """(model index, version index, reference) of every version whose source is in the registry."""
    return [
        (m_index, v_index, version.source.mlflow)
        for m_index, model in enumerate(config.models)
        for v_index, version in enumerate(model.versions)
        if version.source.mlflow is not None
    ]


def adapter_registry_references(config: PlatformConfig) -> list[tuple[int, int, int | None, MlflowReference]]:
    """(model index, adapter index, revision index or None for a one-`source` adapter, reference) of every adapter
    revision whose source is in the registry: resolved like a model version's."""
    found: list[tuple[int, int, int | None, MlflowReference]] = []
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            if adapter.source is not None and adapter.source.mlflow is not None:
                found.append((m_index, a_index, None, adapter.source.mlflow))
            for v_index, version in enumerate(adapter.versions or []):
                if version.source.mlflow is not None:
                    found.append((m_index, a_index, v_index, version.source.mlflow))
    return found


def adapter_entry_name(config: PlatformConfig, m_index: int, a_index: int, v_index: int | None) -> str:
    """The name an adapter revision's registry entry goes by beside the model's versions: its LoRA module's
    (`<adapter>` or `<adapter>@<revision>`, never a version name)."""
    adapter = config.models[m_index].adapters[a_index]
    if v_index is None or adapter.versions is None:
        return adapter.name
    return module_name(adapter.name, adapter.versions[v_index].name)


def pinned_source(weights: str) -> ModelSource | None:
    """The concrete source of a pinned weights location; None when it is not pinned."""
    hf = _HF_PINNED.fullmatch(weights)
    if hf is not None:
        return ModelSource(huggingface=hf["repo"], revision=hf["revision"])
    if _S3.fullmatch(weights):
        prefix, _, folder = weights.rstrip("/").rpartition("/")
        if prefix.count("/") >= 2 and folder:  # `s3://bucket/<folder>` at least
            return ModelSource(s3_uri=prefix, revision=folder)
    return None


def _quote(text: str, secret: str | None = None) -> str:
    """A registry's words, safe to print: one line, bounded, and never the token even if a server echoes it."""
    if secret:
        text = text.replace(secret, "[secret]")
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."


# --- asking the registry ------------------------------------------------------------------


class RegistryUnusable(Exception):
    """The registry cannot answer at all (unreachable, refused the token, answered nonsense): one issue, and no
    further requests."""

    def __init__(self, issue: ConfigIssue):
        super().__init__(str(issue))
        self.issue = issue


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirect would carry the bearer token to wherever it points: the tracking URI must be the final one.
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, PLR0913 - urllib's signature
        return None


@dataclass(frozen=True)
class _Answer:
    status: int
    body: Any  # the parsed JSON, None when the body is not JSON
    text: str


class LiveRegistry:
    """The MLflow tracking server's REST API, one bounded GET at a time."""

    def __init__(self, tracking_uri: str, settings: RegistryConfig, token: str | None):
        self.tracking_uri = tracking_uri
        self.settings = settings
        self.token = token
        self.base = tracking_uri.rstrip("/") + "/api/2.0/mlflow/"
        self._opener = urllib.request.build_opener(_NoRedirects)

    def where(self) -> str:
        return self.tracking_uri

    def _get(self, endpoint: str, params: dict[str, str]) -> _Answer:
        return self._call("GET", endpoint + "?" + urllib.parse.urlencode(params))

    def _call(self, method: Literal["GET", "POST", "DELETE"], path: str, body: dict[str, str] | None = None) -> _Answer:
        # MLflow reads a DELETE's fields from its JSON body, as a POST's (mlflow/server/handlers.py
        # _get_request_message at v3.17.2: only a GET's come from the query string).
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_unredirected_header("Authorization", f"Bearer {self.token}")
        timeout = self.settings.timeout_seconds
        outcome: list[tuple[int, bytes] | BaseException] = []

        def fetch() -> None:
            try:
                try:
                    response = self._opener.open(request, timeout=timeout)
                except urllib.error.HTTPError as error:
                    response = error
                with response:
                    outcome.append((response.status or 0, response.read(MAX_ANSWER_BYTES + 1)))
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                outcome.append(error)

        # The socket timeout bounds each read, not a server that trickles bytes: the whole request gets a deadline,
        # in a daemon thread the program never waits for past it.
        worker = threading.Thread(target=fetch, name="registry-request", daemon=True)
        worker.start()
        worker.join(timeout + 0.5)
        if not outcome:
            raise self._unusable(f"no answer within registry.timeoutSeconds ({timeout} s)")
        result = outcome[0]
        if isinstance(result, BaseException):
            raise self._unusable(_transport_error(result))
        status, data = result
        if len(data) > MAX_ANSWER_BYTES:
            raise self._unusable(f"answered HTTP {status} with more than {MAX_ANSWER_BYTES >> 20} MiB: not a model version")
        text = data.decode("utf-8", errors="replace")
        try:
            body = json.loads(text)
        except (ValueError, RecursionError):
            body = None
        return _Answer(status, body, text)

    def _unusable(self, what: str, key: tuple[str | int, ...] = ("registry", "trackingUri")) -> RegistryUnusable:
        return RegistryUnusable(ConfigIssue(key, f"the registry at {self.where()} {_quote(what, self.token)}"))

    def _said(self, answer: _Answer) -> str:
        body = answer.body
        if isinstance(body, dict) and isinstance(body.get("error_code"), str):
            return _quote(f"HTTP {answer.status} {body['error_code']}: {body.get('message', '')}", self.token)
        return _quote(f"HTTP {answer.status}: {answer.text or '(empty body)'}", self.token)

    def resolve(self, reference: MlflowReference, key: tuple[str | int, ...]) -> RegistryEntry | ConfigIssue:
        if reference.alias is not None:
            endpoint, params, asked = "registered-models/alias", {"name": reference.model, "alias": reference.alias}, "alias"
        else:
            endpoint, params, asked = (
                "model-versions/get",
                {"name": reference.model, "version": str(reference.version)},
                "version",
            )
        answer = self._get(endpoint, params)
        self._refused_token(answer, "the token registryToken", "the secret registryToken")
        if answer.status in (400, 404):
            # MLflow answers an unknown model 404 and an unknown alias 400: ask for the model to say which it is.
            exists = self._get("registered-models/get", {"name": reference.model})
            blamed = "model" if exists.status == 404 else asked
            return ConfigIssue((*key, blamed), f"{describe_reference(reference)}: the registry answered {self._said(answer)}")
        if answer.status != 200:
            raise self._unusable(f"answered {self._said(answer)}")
        version = answer.body.get("model_version") if isinstance(answer.body, dict) else None
        if not isinstance(version, dict):
            raise self._unusable(f"answered something that is not a model version: {self._said(answer)}")
        return _entry_of(version, reference, self.settings.weights_tag, (*key, asked), self.where(), self.token)

    # --- the serving aliases (python -m platform_tools aliases) ---------------------------------

    def _refused_token(self, answer: _Answer, token: str, where_set: str) -> None:
        """An answer refusing the request for its token (or for having none): the registry is unusable, under the
        token's key. `token` names what was sent, `where_set` where to set one."""
        if answer.status in (401, 403):
            given = f"refused {token}" if self.token else f"needs a token: set {where_set}"
            raise self._unusable(f"{given} ({self._said(answer)})", (REGISTRY_TOKEN,))

    def _refused_alias_token(self, answer: _Answer) -> None:
        self._refused_token(answer, f"the token in {REGISTRY_TOKEN_ENV}", REGISTRY_TOKEN_ENV)

    def alias_version(self, model: str, alias: str) -> str | None:
        """The version `alias` of the registered model points at; None when it points nowhere."""
        answer = self._get("registered-models/alias", {"name": model, "alias": alias})
        self._refused_alias_token(answer)
        if answer.status == 404:
            raise self._unusable(f"has no registered model {model!r}: {self._said(answer)}")
        body = answer.body if isinstance(answer.body, dict) else {}
        if answer.status == 400 and body.get("error_code") == "INVALID_PARAMETER_VALUE":
            # An alias the model does not have (mlflow/store/model_registry/sqlalchemy_store.py get_model_version_by_alias).
            return None
        version = body.get("model_version")
        number = version.get("version") if isinstance(version, dict) else None
        if answer.status != 200 or not isinstance(number, str) or not number.isdigit() or len(number) > 18:
            raise self._unusable(f"answered something that is not a model version: {self._said(answer)}")
        return number

    def set_alias(self, model: str, alias: str, version: str) -> None:
        answer = self._call("POST", "registered-models/alias", {"name": model, "alias": alias, "version": version})
        self._refused_alias_token(answer)
        if answer.status != 200:
            raise self._unusable(f"did not set alias {alias!r} of {model!r} to version {version}: {self._said(answer)}")

    def delete_alias(self, model: str, alias: str) -> None:
        answer = self._call("DELETE", "registered-models/alias", {"name": model, "alias": alias})
        self._refused_alias_token(answer)
        if answer.status != 200:
            raise self._unusable(f"did not remove alias {alias!r} of {model!r}: {self._said(answer)}")


def in_clear(uri: str) -> bool:
    """A URL whose requests leave the machine unencrypted (http to anything but loopback)."""
    parsed = urllib.parse.urlsplit(uri)
    return parsed.scheme == "http" and (parsed.hostname or "") not in ("localhost", "127.0.0.1", "::1")


def _transport_error(error: BaseException) -> str:
    if isinstance(error, urllib.error.URLError):
        error = error.reason if isinstance(error.reason, BaseException) else error
    if isinstance(error, TimeoutError):
        return "did not answer in time (registry.timeoutSeconds)"
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return f"cannot be reached: {reason}"


def _entry_of(
    version: dict[str, Any],
    reference: MlflowReference,
    weights_tag: str,
    key: tuple[str | int, ...],
    where: str,
    token: str | None = None,
) -> RegistryEntry | ConfigIssue:
    """A model version as MLflow returns it, checked: the reference's, ready, with pinned weights.
    Whatever of it an error quotes is quoted with the token blanked (a server may echo it)."""
    number, source, status, tags = (version.get(k) for k in ("version", "source", "status", "tags"))
    tags = tags if isinstance(tags, list) else []
    tag = next((t.get("value") for t in tags if isinstance(t, dict) and t.get("key") == weights_tag), None)
    what = f"{describe_reference(reference)}"
    if not isinstance(number, str) or not number.isdigit() or version.get("name") != reference.model:
        return ConfigIssue(key, f"{what}: the registry at {where} answered a model version that is not the one asked for")
    if reference.version is not None and number != str(reference.version):
        return ConfigIssue(key, f"{what}: the registry at {where} answered version {_quote(number, token)}")
    named = f"{what} is version {number}"
    if status != "READY":
        return ConfigIssue(key, f"{named}, whose status is {_quote(str(status), token)!r}, not READY: it cannot be served yet")
    weights, whence = (tag, f"its {weights_tag!r} tag") if isinstance(tag, str) else (source, "its source")
    if not isinstance(weights, str) or pinned_source(weights) is None:
        return ConfigIssue(
            key,
            f"{named}, whose weights ({whence}) are {_quote(str(weights), token)!r}: not a pinned location ({PINNED_FORMS}); "
            f"set the version's {weights_tag!r} tag to one",
        )
    return RegistryEntry(reference.model, reference.alias, reference.version, number, weights)


# --- a recorded resolution ----------------------------------------------------------------


class _RecordingModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel, validate_by_name=True)


class RecordedEntry(_RecordingModel):
    registered_model: Annotated[str, Field(min_length=1, max_length=256)]
    alias: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    version: Annotated[int, Field(gt=0)] | None = None
    registry_version: Annotated[str, Field(pattern=r"^[0-9]{1,18}$")]
    weights: Annotated[str, Field(min_length=1, max_length=2048)]

    @model_validator(mode="after")
    def _alias_or_version(self) -> RecordedEntry:
        if (self.alias is None) == (self.version is None):
            raise ValueError("give exactly one of 'alias' or 'version'")
        if self.version is not None and str(self.version) != self.registry_version:
            raise ValueError(f"version {self.version} resolved to registryVersion {self.registry_version!r}")
        if pinned_source(self.weights) is None:
            raise ValueError(f"weights {self.weights!r} is not a pinned location ({PINNED_FORMS})")
        return self


class Recording(_RecordingModel):
    format: Literal["inference-platform/registry-resolution"]
    format_version: Literal[1]
    tracking_uri: Annotated[str, Field(min_length=1, max_length=2048)]
    recorded_at: Annotated[str, Field(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")]
    entries: list[RecordedEntry]


def recording(output: dict[str, Any], recorded_at: str) -> dict[str, Any]:
    """The recording of a live resolution, from its `modelRegistry` stack output: each reference once."""
    entries: dict[str, dict[str, Any]] = {}
    for versions in output["models"].values():
        for entry in versions.values():
            if entry.get("source") == "registry":
                record = {k: v for k, v in entry.items() if k != "source"}
                entries[json.dumps([record["registeredModel"], record.get("alias"), record.get("version")])] = record
    return {
        "format": RECORDING_FORMAT,
        "formatVersion": RECORDING_FORMAT_VERSION,
        "trackingUri": output["trackingUri"],
        "recordedAt": recorded_at,
        "entries": [entries[key] for key in sorted(entries)],
    }


def read_recording(path: Path, where: str | None = None) -> Recording:
    """A recording file, strictly checked; RegistryFileError naming the file (`where` says which and how it was
    named: by default the recording INFERENCE_PLATFORM_REGISTRY_FILE names) and the bad key."""
    where = where or f"the recorded registry resolution {path} ({REGISTRY_FILE_ENV})"
    try:
        # Not a FIFO or a device, whose read would block or never end.
        if not stat.S_ISREG(path.stat().st_mode):
            raise RegistryFileError(f"{where} is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_RECORDING_BYTES + 1)
    except OSError as error:
        raise RegistryFileError(f"{where} cannot be read: {error.strerror or error}") from None
    if len(data) > MAX_RECORDING_BYTES:
        raise RegistryFileError(f"{where} is larger than {MAX_RECORDING_BYTES >> 20} MiB: not a recording")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise RegistryFileError(f"{where} is not JSON: {_quote(str(error))}") from None
    try:
        parsed = Recording.model_validate(document, by_alias=True, by_name=False)
    except ValidationError as error:
        problems = [f"{_json_path(detail['loc'])}: {_quote(detail['msg'])}" for detail in error.errors(include_url=False)]
        raise RegistryFileError(f"{where} is not a valid recording: " + "; ".join(problems[:5])) from None
    seen: set[tuple[str, str | None, int | None]] = set()
    for index, entry in enumerate(parsed.entries):
        reference = (entry.registered_model, entry.alias, entry.version)
        if reference in seen:
            raise RegistryFileError(f"{where}: entries[{index}] records a reference an earlier entry records")
        seen.add(reference)
    return parsed


def _json_path(location: tuple[Any, ...]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the document)"


class RecordedRegistry:
    """A recording's answers, for a preview without the registry."""

    def __init__(self, path: Path, parsed: Recording):
        self.path = path
        self.parsed = parsed
        self.entries = {(e.registered_model, e.alias, e.version): e for e in parsed.entries}

    def resolve(self, reference: MlflowReference, key: tuple[str | int, ...]) -> RegistryEntry | ConfigIssue:
        found = self.entries.get(_reference_of(reference))
        if found is None:
            asked = "alias" if reference.alias is not None else "version"
            return ConfigIssue(
                (*key, asked),
                f"the recorded registry resolution {self.path} has no entry for {describe_reference(reference)}: "
                "preview live once to record it",
            )
        return RegistryEntry(reference.model, reference.alias, reference.version, found.registry_version, found.weights)


# --- the lock file --------------------------------------------------------------------------

# `registry.lockFile` is relative to the project directory, the one holding Pulumi.yaml: this package's parent.
PROJECT_DIR = Path(__file__).resolve().parent.parent


def read_recording_of(path: Path, settings: RegistryConfig, key: str, named: str, read_as: str | None = None) -> Recording:
    """A recording file (`named` says which, for the message; `read_as` for read_recording's) that must be of the
    stack's registry: ConfigError at `registry.<key>` when it records another."""
    assert settings.tracking_uri is not None
    parsed = read_recording(path, read_as)
    if parsed.tracking_uri.rstrip("/") != settings.tracking_uri.rstrip("/"):
        raise ConfigError(
            [
                ConfigIssue(
                    ("registry", key),
                    f"{settings.tracking_uri!r}, but {named} is of {parsed.tracking_uri!r}: record it from this registry",
                )
            ]
        )
    return parsed


def read_lock(settings: RegistryConfig, project_dir: Path) -> tuple[str, Recording]:
    """The lock file `registry.lockFile` names (its path as given, and its content), a recording of this registry;
    ConfigError at that key when it cannot be read or is not a recording."""
    assert settings.lock_file is not None
    named = f"the lock file {settings.lock_file}"
    try:
        locked = read_recording_of(project_dir / settings.lock_file, settings, "lockFile", named, read_as=named)
    except RegistryFileError as error:
        raise ConfigError([ConfigIssue(("registry", "lockFile"), str(error))]) from None
    return settings.lock_file, locked


def lock_differences(
    lock_file: str,
    locked: Recording,
    answered: dict[tuple[str, str | None, int | None], tuple[tuple[str | int, ...], RegistryEntry]],
) -> list[ConfigIssue]:
    """Each reference whose answer the lock file does not hold (its version and weights), under the stack key
    that first asked it."""
    held = {(e.registered_model, e.alias, e.version): e for e in locked.entries}
    refresh = f"preview live and commit its registry-resolution.json as {lock_file} to deploy it"
    issues = []
    for reference, (key, entry) in answered.items():
        answer = f"version {entry.registry_version} ({entry.weights})"
        asked = f"alias {entry.alias!r}" if entry.alias is not None else f"version {entry.requested_version}"
        found = held.get(reference)
        if found is None:
            message = (
                f"{asked} of {entry.registered_model!r} resolves to {answer}, which the lock file {lock_file} does "
                f"not hold: {refresh}"
            )
        elif (found.registry_version, found.weights) != (entry.registry_version, entry.weights):
            message = (
                f"{asked} of {entry.registered_model!r} now resolves to {answer}; the lock file {lock_file} holds "
                f"version {found.registry_version} ({found.weights}): {refresh}"
            )
        else:
            continue
        issues.append(ConfigIssue(key, message))
    return issues


# --- resolving a config -------------------------------------------------------------------


def resolve_registry(
    config: PlatformConfig, token: str | None, *, recording_file: str | None, dry_run: bool, project_dir: Path = PROJECT_DIR
) -> tuple[PlatformConfig, RegistryResolution | None]:
    """The config with every `mlflow` source replaced by the pinned source the registry names, and what each
    resolved to; (config, None) when no version is in the registry. Raises ConfigError naming each reference the
    registry (or the recording) cannot resolve, and under `pulumi up` each answer the lock file does not hold;
    RegistryFileError for a recording or lock file that cannot be used."""
    references = registry_references(config)
    adapter_references = adapter_registry_references(config)
    if not references and not adapter_references:
        return config, None
    settings = config.registry
    if settings.tracking_uri is None:  # the config checks report it (check_registry_sources): not through load_config
        raise ConfigError([ConfigIssue(("registry", "trackingUri"), "is required: versions name sources in the MLflow registry")])
    resolver: LiveRegistry | RecordedRegistry
    if recording_file:
        if not dry_run:
            raise RegistryFileError(
                f"{REGISTRY_FILE_ENV} is set ({recording_file}): a recorded registry resolution is for previews only, "
                "and `pulumi up` always asks the registry: unset it"
            )
        path = Path(recording_file)
        parsed = read_recording_of(path, settings, "trackingUri", f"the recorded registry resolution {path}")
        resolver = RecordedRegistry(path, parsed)
    else:
        if token and in_clear(settings.tracking_uri):
            raise ConfigError(
                [
                    ConfigIssue(
                        ("registry", "trackingUri"),
                        f"{settings.tracking_uri!r} is plain http to another host: registryToken would cross the network "
                        "in clear; use https (plain http is for a registry on loopback only)",
                    )
                ]
            )
        resolver = LiveRegistry(settings.tracking_uri, settings, token)
    lock = read_lock(settings, project_dir) if settings.lock_file is not None else None

    issues: list[ConfigIssue] = []
    # Each reference answered, under the first key that asked it: what the lock file must hold.
    answered: dict[tuple[str, str | None, int | None], tuple[tuple[str | int, ...], RegistryEntry]] = {}
    answers: dict[tuple[str, str | None, int | None], RegistryEntry | ConfigIssue] = {}
    versions: dict[tuple[str, str], RegistryEntry] = {}
    sources: dict[tuple[int, int], ModelSource] = {}

    def answer(reference: MlflowReference, key: tuple[str | int, ...]) -> RegistryEntry | None:
        cached = answers.get(_reference_of(reference))
        if cached is None:
            try:
                cached = resolver.resolve(reference, key)
            except RegistryUnusable as error:
                raise ConfigError([error.issue]) from None
            answers[_reference_of(reference)] = cached
        if isinstance(cached, ConfigIssue):
            # The same reference in another version: the same answer, under that version's key.
            issues.append(ConfigIssue((*key, cached.path[-1]), cached.message))
            return None
        answered.setdefault(_reference_of(reference), ((*key, "alias" if reference.alias is not None else "version"), cached))
        return cached

    for m_index, v_index, reference in references:
        key: tuple[str | int, ...] = ("models", m_index, "versions", v_index, "source", "mlflow")
        entry = answer(reference, key)
        if entry is None:
            continue
        model = config.models[m_index]
        versions[(model.name, model.versions[v_index].name)] = entry
        source = pinned_source(entry.weights)
        assert source is not None  # checked where the entry was made
        sources[(m_index, v_index)] = source
    adapter_sources: dict[tuple[int, int, int | None], ModelSource] = {}
    for m_index, a_index, revision_index, reference in adapter_references:
        revision_key = ("versions", revision_index) if revision_index is not None else ()
        key = ("models", m_index, "adapters", a_index, *revision_key, "source", "mlflow")
        entry = answer(reference, key)
        if entry is None:
            continue
        versions[(config.models[m_index].name, adapter_entry_name(config, m_index, a_index, revision_index))] = entry
        source = pinned_source(entry.weights)
        assert source is not None  # checked where the entry was made
        adapter_sources[(m_index, a_index, revision_index)] = source
    if issues:
        raise ConfigError(issues)
    differences = lock_differences(lock[0], lock[1], answered) if lock is not None else []
    if differences and not dry_run:
        raise ConfigError(differences)
    resolved = _with_adapter_sources(_with_sources(config, sources), adapter_sources)
    shown = tuple(str(issue) for issue in differences)
    if isinstance(resolver, RecordedRegistry):
        # The stack's own lock file goes by the name the stack gives it (never this machine's path to it).
        recorded = resolver.path
        is_lock = settings.lock_file is not None and recorded.resolve() == (project_dir / settings.lock_file).resolve()
        resolution = RegistryResolution(
            "recorded",
            resolver.parsed.tracking_uri,
            versions,
            settings.lock_file if is_lock else str(recorded),
            resolver.parsed.recorded_at,
        )
    else:
        resolution = RegistryResolution("live", settings.tracking_uri, versions)
    return resolved, replace(resolution, lock_file=settings.lock_file, lock_differences=shown)


def _with_sources(config: PlatformConfig, sources: dict[tuple[int, int], ModelSource]) -> PlatformConfig:
    models = [
        model.model_copy(
            update={
                "versions": [
                    version.model_copy(update={"source": sources[(m_index, v_index)]})
                    if (m_index, v_index) in sources
                    else version
                    for v_index, version in enumerate(model.versions)
                ]
            }
        )
        for m_index, model in enumerate(config.models)
    ]
    return config.model_copy(update={"models": models})


def _with_adapter_sources(config: PlatformConfig, sources: dict[tuple[int, int, int | None], ModelSource]) -> PlatformConfig:
    """The config with each adapter revision's registry reference replaced by the pinned source it named."""
    if not sources:
        return config
    models = list(config.models)
    for (m_index, a_index, v_index), source in sources.items():
        model = models[m_index]
        adapters = list(model.adapters)
        adapter = adapters[a_index]
        if v_index is None:
            adapters[a_index] = adapter.model_copy(update={"source": source})
        else:
            revisions = list(adapter.versions or [])
            revisions[v_index] = revisions[v_index].model_copy(update={"source": source})
            adapters[a_index] = adapter.model_copy(update={"versions": revisions})
        models[m_index] = model.model_copy(update={"adapters": adapters})
    return config.model_copy(update={"models": models})
