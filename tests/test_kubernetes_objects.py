"""Built-in Kubernetes objects are registered by `components.k8s_objects.KubernetesObject`, not
by pulumi-kubernetes' typed classes: these tests hold it to registering exactly what the typed
class would (type token, inputs, secret outputs), kind by kind, under the same mock engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.constants import KUBERNETES_API_GROUPS

from .helpers import Evaluated, capture_requests, evaluate_twins, raw_stack

# Registers each manifest twice: through KubernetesObject and through the typed class.
TWIN_PROGRAM = """
import json, os
import pulumi
import pulumi_kubernetes as k8s
from pydantic.alias_generators import to_snake
from components.k8s_objects import KubernetesObject

for index, manifest in enumerate(json.loads(os.environ["TWIN_SAMPLES"])):
    group, _, version = manifest["apiVersion"].rpartition("/")
    module = getattr(getattr(k8s, group.split(".")[0] if group else "core"), version)
    typed_class = getattr(module, manifest["kind"])
    KubernetesObject(f"generic-{index}", manifest, pulumi.ResourceOptions())
    kwargs = {to_snake(key): value for key, value in manifest.items() if key not in ("apiVersion", "kind")}
    typed_class(f"typed-{index}", **kwargs)
"""


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(
        raw_stack("prod"), secrets={"inference-platform:huggingFaceTokens": json.dumps({"serving": "hf_test_token"})}
    )


def built_in(record) -> bool:
    """A built-in object (not a custom resource, not a Helm release)."""
    api_version = record.inputs.get("apiVersion")
    return (
        record.type.startswith("kubernetes:")
        and api_version is not None
        and api_version.rpartition("/")[0] in KUBERNETES_API_GROUPS
    )


def test_every_built_in_kind_the_platform_declares_is_covered(prod):
    kinds = {r.inputs["kind"] for r in prod.records if built_in(r)}
    assert kinds == {
        "Namespace",
        "ResourceQuota",
        "LimitRange",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "Secret",
        "ConfigMap",
        "PriorityClass",
        "Deployment",
        # The images pre-pulled on every GPU node (components/specs/image_prepull.py).
        "DaemonSet",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        # Tenants' own GPU Jobs held to a Kueue queue (components/specs/batch_admission.py).
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        # The weight mirror's copies and the batch jobs' shards.
        "Job",
    }


def test_registered_exactly_as_the_typed_classes_register_them(prod, tmp_path, monkeypatch):
    from preview.render import plain, unsecret

    # One manifest of each built-in kind, as the platform declares it (the secret made plain).
    samples = {}
    for record in prod.records:
        if built_in(record) and record.inputs["kind"] not in samples:
            samples[record.inputs["kind"]] = unsecret(record.inputs)
    twins = evaluate_twins(TWIN_PROGRAM, list(samples.values()), tmp_path, monkeypatch)
    by_name = {r.name: r for r in twins.resources}
    for index, kind in enumerate(samples):
        generic, typed = by_name[f"generic-{index}"], by_name[f"typed-{index}"]
        assert generic.type == typed.type, kind
        assert plain(generic.inputs) == plain(typed.inputs), kind
        assert sorted(generic.additional_secret_outputs) == sorted(typed.additional_secret_outputs), kind
        assert generic.version == typed.version and generic.version, kind
    secret = next(r for r in twins.resources if r.name.startswith("generic-") and r.type == "kubernetes:core/v1:Secret")
    assert sorted(secret.additional_secret_outputs) == ["data", "stringData"]


def test_type_tokens(prod):
    from components.k8s_objects import type_token

    assert type_token("v1", "Namespace") == "kubernetes:core/v1:Namespace"
    assert type_token("networking.k8s.io/v1", "NetworkPolicy") == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
    for record in prod.records:
        if built_in(record):
            assert record.type == type_token(record.inputs["apiVersion"], record.inputs["kind"])


def test_the_token_table_reads_pulumi_kubernetes_own_source():
    """The typed classes' own registration strings, read from the installed package."""
    import pulumi_kubernetes

    from components.k8s_objects import type_token

    package = Path(pulumi_kubernetes.__file__).parent
    for api_version, kind, path in (
        ("v1", "Namespace", "core/v1/Namespace.py"),
        ("apps/v1", "Deployment", "apps/v1/Deployment.py"),
        ("scheduling.k8s.io/v1", "PriorityClass", "scheduling/v1/PriorityClass.py"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", "rbac/v1/RoleBinding.py"),
    ):
        assert f"'{type_token(api_version, kind)}'" in (package / path).read_text()


# Registers each Helm release and YAML file twice: through the project's classes and through the typed ones.
PROVIDER_TWIN_PROGRAM = """
import json, os
import pulumi
import pulumi_kubernetes as k8s
from components.k8s_objects import HelmRelease, YamlConfigFile

samples = json.loads(os.environ["TWIN_SAMPLES"])
for index, inputs in enumerate(samples["releases"]):
    HelmRelease(f"generic-release-{index}", inputs, pulumi.ResourceOptions())
    repository = inputs.get("repositoryOpts")
    k8s.helm.v3.Release(
        f"typed-release-{index}",
        chart=inputs["chart"],
        name=inputs["name"],
        namespace=inputs["namespace"],
        values=inputs["values"],
        version=inputs["version"],
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repository["repo"]) if repository else None,
    )
for index, file in enumerate(samples["files"]):
    YamlConfigFile(f"generic-file-{index}", file, pulumi.ResourceOptions())
    k8s.yaml.v2.ConfigFile(f"typed-file-{index}", file=file)
"""


def test_helm_releases_and_yaml_files_registered_exactly_as_the_typed_classes_register_them(prod, tmp_path, monkeypatch):
    """The whole RegisterResource request of each pair (type, inputs, custom or remote, provider version and download
    URL, every option), its name aside: one release from a chart repository, one from an OCI registry, each YAML
    file the platform installs."""
    from components.k8s_objects import HELM_RELEASE, YAML_CONFIG_FILE
    from preview.render import plain

    releases = [plain(r.inputs) for r in prod.records if r.type == HELM_RELEASE]
    repository = next(r for r in releases if "repositoryOpts" in r)
    oci = next(r for r in releases if r["chart"].startswith("oci://"))
    files = [r.inputs["file"] for r in prod.records if r.type == YAML_CONFIG_FILE]
    assert len(files) == 2
    requests = capture_requests(monkeypatch)
    samples = {"releases": [{k: v for k, v in r.items() if k != "compat"} for r in (repository, oci)], "files": files}
    evaluate_twins(PROVIDER_TWIN_PROGRAM, samples, tmp_path, monkeypatch)
    pairs = [(f"release-{i}", HELM_RELEASE) for i in range(2)] + [(f"file-{i}", YAML_CONFIG_FILE) for i in range(2)]
    for suffix, token in pairs:
        generic, typed = requests[f"generic-{suffix}"], requests[f"typed-{suffix}"]
        assert generic.type == typed.type == token
        assert generic.version and generic.remote == (token == YAML_CONFIG_FILE)
        generic.name = typed.name = ""
        assert generic == typed, suffix


def test_the_release_and_file_tokens_read_pulumi_kubernetes_own_source():
    import pulumi_kubernetes

    from components.k8s_objects import HELM_RELEASE, YAML_CONFIG_FILE

    package = Path(pulumi_kubernetes.__file__).parent
    assert f"'{HELM_RELEASE}'" in (package / "helm/v3/Release.py").read_text()
    assert f"'{YAML_CONFIG_FILE}'" in (package / "yaml/v2/ConfigFile.py").read_text()
