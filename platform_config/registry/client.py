"""The live MLflow registry: its REST API (plain `urllib`), one bounded request at a time (no redirects, a deadline
and a size limit on each answer); the model versions it answers, checked; and the serving aliases it moves."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigIssue
from ..models import PINNED_FORMS, REGISTRY_TOKEN, MlflowReference, RegistryConfig, pinned_source
from .entries import RegistryEntry, describe_reference, quote

# The registry token where the secret `registryToken` cannot be read (the offline preview, the aliases tool): a stack's
# secure value is a placeholder there (no passphrase, no KMS).
REGISTRY_TOKEN_ENV = "INFERENCE_PLATFORM_REGISTRY_TOKEN"
# A model version is a few KiB of JSON; a larger answer is not one (a hostile or broken server).
MAX_ANSWER_BYTES = 1 << 20


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
        return RegistryUnusable(ConfigIssue(key, f"the registry at {self.where()} {quote(what, self.token)}"))

    def _said(self, answer: _Answer) -> str:
        body = answer.body
        if isinstance(body, dict) and isinstance(body.get("error_code"), str):
            return quote(f"HTTP {answer.status} {body['error_code']}: {body.get('message', '')}", self.token)
        return quote(f"HTTP {answer.status}: {answer.text or '(empty body)'}", self.token)

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
        return ConfigIssue(key, f"{what}: the registry at {where} answered version {quote(number, token)}")
    named = f"{what} is version {number}"
    if status != "READY":
        return ConfigIssue(key, f"{named}, whose status is {quote(str(status), token)!r}, not READY: it cannot be served yet")
    weights, whence = (tag, f"its {weights_tag!r} tag") if isinstance(tag, str) else (source, "its source")
    if not isinstance(weights, str) or pinned_source(weights) is None:
        return ConfigIssue(
            key,
            f"{named}, whose weights ({whence}) are {quote(str(weights), token)!r}: not a pinned location ({PINNED_FORMS}); "
            f"set the version's {weights_tag!r} tag to one",
        )
    return RegistryEntry(reference.model, reference.alias, reference.version, number, weights)
