"""Validate every rendered Kubernetes object against upstream schemas.

- Core kinds: the official Kubernetes schemas shipped in the `kubernetes-validate` package, in
  its strict flavour (unknown fields rejected), at the cluster's Kubernetes version. The files,
  the version selection and the Draft 2020-12 validator are kubernetes-validate's own; this
  module only keeps the loaded schemas between objects (the package reloads the 1.4 MB
  definitions file on every call).
- Custom resources: the projects' own CRD schemas (Knative, Istio, Prometheus Operator, NVIDIA,
  ...) from the folder named by CRD_SCHEMA_DIR (default: ../shared/crd-schemas), laid out as
  `<group>/<kind>_<version>.json`, read in place. Their `metadata` is checked against the core
  ObjectMeta schema and their top level may hold only apiVersion, kind, metadata, spec, status.
- A kind with neither schema is reported as not validated, never passed silently.

Each object is first checked by jsonschema-rs (PyPI `jsonschema-rs`, pinned in requirements-dev.txt) against the very
same schema, which tells valid from invalid about thirty times faster; Python's jsonschema then runs only on an object
jsonschema-rs rejects, so every error is reported in jsonschema's own words. Formats are not checked, as jsonschema
checks none without a format checker (jsonschema-rs 0.60.3 checks them by default for Draft 7). A schema jsonschema-rs
cannot compile (prometheusrule_v1.json's `(?i)` pattern) is checked by jsonschema alone, and so is every schema where
the package is missing. tests/test_schemas_fast.py holds the two to the same results on every committed stack's
objects and on invalid ones.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import kubernetes_validate
import referencing
from kubernetes_validate import utils as kv_utils

try:
    import jsonschema_rs
except ImportError:  # pragma: no cover - the pinned requirements install it
    jsonschema_rs = None  # type: ignore[assignment]

DEFAULT_CRD_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "crd-schemas"
CRD_TOP_LEVEL = {"apiVersion", "kind", "metadata", "spec", "status"}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def crd_schema_dir() -> Path:
    return Path(os.environ.get("CRD_SCHEMA_DIR") or DEFAULT_CRD_DIR)


@dataclass
class ObjectResult:
    kind: str
    api_version: str
    namespace: str | None
    name: str
    # "valid", "invalid" or "not-validated"
    status: str
    schema: str
    errors: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name} ({self.api_version})"


def _error_text(error: jsonschema.ValidationError, prefix: str = "") -> str:
    path = ".".join([prefix] * bool(prefix) + [str(p) for p in error.absolute_path]) or "(root)"
    message = error.message if len(error.message) <= 240 else error.message[:237] + "..."
    return f"{path}: {message}"


class KubernetesSchemas:
    """kubernetes-validate's strict schemas for one Kubernetes version, loaded once."""

    def __init__(self, kubernetes_version: str):
        versions = kv_utils.all_versions()
        wanted = kv_utils.major_minor(kubernetes_version)
        candidates = [v for v in versions if _version_key(kv_utils.major_minor(v)) <= _version_key(wanted)]
        if not candidates:
            raise ValueError(f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for Kubernetes {wanted}")
        self.version = candidates[-1]
        self.directory = f"kubernetes-json-schema/v{self.version}-local-strict"
        definitions = kv_utils.schema_contents(f"{self.directory}/_definitions.json", self.version)
        self._definitions = referencing.Resource.from_contents(definitions)
        self._validators: dict[str, jsonschema.protocols.Validator | None] = {}
        self._fast: dict[str, Any] = {}
        # The definitions the kinds' schemas refer to (`/api/_definitions.json#/$defs/...`), by their `$id`.
        self._fast_registry = jsonschema_rs.Registry([(definitions["$id"], definitions)]) if jsonschema_rs is not None else None

    def schema_file(self, obj: dict[str, Any]) -> str:
        # kubernetes-validate's own naming: rbac.authorization.k8s.io/v1 -> rbac-v1
        api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", obj["apiVersion"])
        return f"{obj['kind'].lower()}-{api_version}.json"

    def validator(self, obj: dict[str, Any]) -> jsonschema.protocols.Validator | None:
        name = self.schema_file(obj)
        if name not in self._validators:
            try:
                schema = kv_utils.schema_contents(f"{self.directory}/{name}", self.version)
            except FileNotFoundError:
                self._validators[name] = None
            else:
                registry = self._definitions @ (referencing.Resource.from_contents(schema) @ referencing.Registry())
                self._validators[name] = jsonschema.validators.Draft202012Validator(schema, registry=registry)
        return self._validators[name]

    def fast(self, obj: dict[str, Any], validator: jsonschema.protocols.Validator) -> Any:
        """jsonschema-rs's validator of `validator`'s schema (the object's kind's), or None."""
        name = self.schema_file(obj)
        if name not in self._fast:
            self._fast[name] = fast_validator(validator.schema, self._fast_registry)
        return self._fast[name]

    def object_meta(self) -> jsonschema.protocols.Validator:
        registry = self._definitions @ referencing.Registry()
        return jsonschema.validators.Draft202012Validator(OBJECT_META_SCHEMA, registry=registry)

    def fast_object_meta(self) -> Any:
        return fast_validator(OBJECT_META_SCHEMA, self._fast_registry)


OBJECT_META_SCHEMA = {"$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{OBJECT_META}"}


def fast_validator(schema: Any, registry: Any = None) -> Any:
    """jsonschema-rs's validator of `schema`, in the draft jsonschema uses for it (Draft 2020-12 for
    kubernetes-validate's, Draft 7 for the CRDs', each as its `$schema` says or jsonschema's default), checking no
    formats; None without the package or where it cannot compile the schema."""
    if jsonschema_rs is None:
        return None
    draft = jsonschema.validators.validator_for(schema, default=jsonschema.validators.Draft7Validator)
    kind = {
        jsonschema.validators.Draft202012Validator: jsonschema_rs.Draft202012Validator,
        jsonschema.validators.Draft7Validator: jsonschema_rs.Draft7Validator,
    }.get(draft)
    if kind is None:
        return None
    try:
        return kind(schema, registry=registry, validate_formats=False)
    except (ValueError, jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError):
        return None


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


class CrdSchemas:
    def __init__(self, directory: Path):
        self.directory = directory
        self._validators: dict[Path, jsonschema.protocols.Validator | None] = {}
        self._fast: dict[Path, Any] = {}

    def path(self, obj: dict[str, Any]) -> Path | None:
        if "/" not in obj["apiVersion"]:
            return None
        group, version = obj["apiVersion"].split("/", 1)
        return self.directory / group / f"{obj['kind'].lower()}_{version}.json"

    def validator(self, obj: dict[str, Any]) -> jsonschema.protocols.Validator | None:
        path = self.path(obj)
        if path is None:
            return None
        if path not in self._validators:
            self._validators[path] = (
                jsonschema.validators.Draft7Validator(json.loads(path.read_text())) if path.exists() else None
            )
        return self._validators[path]

    def fast(self, obj: dict[str, Any], validator: jsonschema.protocols.Validator) -> Any:
        """jsonschema-rs's validator of `validator`'s schema (the object's CRD's), or None."""
        path = self.path(obj)
        assert path is not None
        if path not in self._fast:
            self._fast[path] = fast_validator(validator.schema)
        return self._fast[path]


class SchemaValidator:
    """`fast=False` checks with jsonschema alone (the comparison's other side: tests/test_schemas_fast.py)."""

    def __init__(self, kubernetes_version: str, crd_dir: Path | None = None, *, fast: bool = True):
        self.kubernetes = KubernetesSchemas(kubernetes_version)
        self.crds = CrdSchemas(crd_dir or crd_schema_dir())
        self._object_meta = self.kubernetes.object_meta()
        self._fast = fast
        self._fast_object_meta = self.kubernetes.fast_object_meta() if fast else None

    def _errors(self, validator: jsonschema.protocols.Validator, fast: Any, value: Any, prefix: str = "") -> list[str]:
        """jsonschema's errors, where jsonschema-rs (if it has the schema) does not find the value valid."""
        if self._fast and fast is not None and fast.is_valid(value):
            return []
        return [_error_text(e, prefix) for e in validator.iter_errors(value)]

    def validate(self, obj: dict[str, Any]) -> ObjectResult:
        metadata = obj.get("metadata") or {}
        result = ObjectResult(
            kind=obj.get("kind", "?"),
            api_version=obj.get("apiVersion", "?"),
            namespace=metadata.get("namespace"),
            name=metadata.get("name", "?"),
            status="not-validated",
            schema="",
        )
        core = self.kubernetes.validator(obj)
        if core is not None:
            result.schema = f"kubernetes-validate {self.kubernetes.version} strict: {self.kubernetes.schema_file(obj)}"
            result.errors = self._errors(core, self._fast and self.kubernetes.fast(obj, core), obj)
        else:
            crd = self.crds.validator(obj)
            if crd is None:
                path = self.crds.path(obj)
                # Named inside the CRD folder: the report goes into pull requests, where this machine's paths say nothing.
                looked = path.relative_to(self.crds.directory) if path is not None else "no CRD schema for a core kind"
                result.schema = f"no schema (looked for kubernetes-validate {self.kubernetes.schema_file(obj)} and {looked})"
                return result
            result.schema = f"CRD schema {self.crds.path(obj).relative_to(self.crds.directory)}"  # type: ignore[union-attr]
            result.errors = self._errors(crd, self._fast and self.crds.fast(obj, crd), obj)
            result.errors += self._errors(self._object_meta, self._fast_object_meta, metadata, "metadata")
            # A CRD may declare top-level fields of its own (Kueue's WorkloadPriorityClass: `value`,
            # `description`); anything else there is unknown.
            declared = set((crd.schema.get("properties") or {}) if isinstance(crd.schema, dict) else {})
            result.errors += [f"{key}: unknown top-level field" for key in sorted(set(obj) - CRD_TOP_LEVEL - declared)]
        result.status = "invalid" if result.errors else "valid"
        return result

    def validate_all(self, objects: Iterable[dict[str, Any]]) -> list[ObjectResult]:
        return [self.validate(obj) for obj in objects]


@lru_cache(maxsize=4)
def validator_for(kubernetes_version: str, crd_dir: str) -> SchemaValidator:
    return SchemaValidator(kubernetes_version, Path(crd_dir))
