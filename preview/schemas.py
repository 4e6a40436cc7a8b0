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

    def object_meta(self) -> jsonschema.protocols.Validator:
        registry = self._definitions @ referencing.Registry()
        return jsonschema.validators.Draft202012Validator(
            {"$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{OBJECT_META}"}, registry=registry
        )


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


class CrdSchemas:
    def __init__(self, directory: Path):
        self.directory = directory
        self._validators: dict[Path, jsonschema.protocols.Validator | None] = {}

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


class SchemaValidator:
    def __init__(self, kubernetes_version: str, crd_dir: Path | None = None):
        self.kubernetes = KubernetesSchemas(kubernetes_version)
        self.crds = CrdSchemas(crd_dir or crd_schema_dir())
        self._object_meta = self.kubernetes.object_meta()

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
            result.errors = [_error_text(e) for e in core.iter_errors(obj)]
        else:
            crd = self.crds.validator(obj)
            if crd is None:
                path = self.crds.path(obj)
                # Named inside the CRD folder: the report goes into pull requests, where this machine's paths say nothing.
                looked = path.relative_to(self.crds.directory) if path is not None else "no CRD schema for a core kind"
                result.schema = f"no schema (looked for kubernetes-validate {self.kubernetes.schema_file(obj)} and {looked})"
                return result
            result.schema = f"CRD schema {self.crds.path(obj).relative_to(self.crds.directory)}"  # type: ignore[union-attr]
            result.errors = [_error_text(e) for e in crd.iter_errors(obj)]
            result.errors += [_error_text(e, "metadata") for e in self._object_meta.iter_errors(metadata)]
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
