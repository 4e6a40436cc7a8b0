"""Every AWS resource the platform declares is registered by `components.aws_objects.AwsResource`, not by pulumi-aws'
typed classes (whose `ec2`, `s3`, `eks`, `iam` and `autoscaling` modules took a preview about 0.6 s to import): these
tests hold it to registering exactly what the typed class would (type token, inputs, provider version, secret outputs,
aliases), resource by resource, under the same mock engine, and the outputs the program reads to what the typed
class's give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components import aws_objects

from .helpers import Evaluated, capture_requests, evaluate_twins, raw_stack

# Registers each recorded resource twice: through AwsResource and through the typed class, the recorded inputs given as
# the typed class's keyword arguments (snake_case names; a map's keys, the tags' and the node labels', kept as they are).
TWIN_PROGRAM = """
import json, os
import pulumi
import pulumi_aws as aws
from pydantic.alias_generators import to_snake
from components.aws_objects import AwsResource

def keywords(value, key=None):
    if isinstance(value, dict) and key not in ("tags", "labels"):
        return {to_snake(k): keywords(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [keywords(v) for v in value]
    return value

for index, (token, inputs) in enumerate(json.loads(os.environ["TWIN_SAMPLES"])):
    module, _, kind = token.split(":", 1)[1].partition("/")
    typed_class = getattr(getattr(aws, module), token.rsplit(":", 1)[1])
    outputs = {"latestVersion": int} if token == "aws:ec2/launchTemplate:LaunchTemplate" else {}
    generic = AwsResource(token, f"generic-{index}", inputs, pulumi.ResourceOptions(), outputs=outputs)
    typed = typed_class(f"typed-{index}", **keywords(inputs))
    for side, resource in (("generic", generic), ("typed", typed)):
        pulumi.export(f"aliases-{side}-{index}", pulumi.Output.all(*resource._aliases))
    if outputs:
        # What the program reads, as the node group's version string (the mock engine answers the first version).
        pulumi.export(f"version-generic-{index}", generic.output("latestVersion").apply(repr))
        pulumi.export(f"version-typed-{index}", typed.latest_version.apply(repr))
"""

GENERIC_TOKENS = {
    value for name, value in vars(aws_objects).items() if name.isupper() and isinstance(value, str) and value.startswith("aws:")
}


SECRETS = {"inference-platform:huggingFaceTokens": json.dumps({"serving": "hf_test_token"})}


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(raw_stack("prod"), secrets=SECRETS)


@pytest.fixture(scope="module")
def prod_irsa() -> Evaluated:
    """prod with IRSA for its workloads' roles: the cluster's OIDC identity provider, no Pod Identity."""
    raw = raw_stack("prod")
    raw["cluster"]["eks"]["workloadIdentity"] = "irsa"
    return Evaluated(raw, secrets=SECRETS)


def test_every_aws_resource_is_registered_by_one_of_the_tokens(prod, prod_irsa):
    declared = {record.type for evaluated in (prod, prod_irsa) for record in evaluated.records}
    assert len(GENERIC_TOKENS) == 19
    assert {token for token in declared if token.startswith("aws:")} == GENERIC_TOKENS


def test_registered_exactly_as_the_typed_classes_register_them(prod, prod_irsa, tmp_path, monkeypatch):
    from preview.render import plain, unsecret

    samples = {}
    for record in [*prod.records, *prod_irsa.records]:
        if record.type in GENERIC_TOKENS and record.type not in samples:
            samples[record.type] = unsecret(record.inputs)
    # The VPC is the cluster's, unknown at preview (so absent from the record); the typed class requires one. So is a
    # role's name, which IAM computes (the attachment's `role` is null at preview).
    samples[aws_objects.VPC_ENDPOINT] = {"vpcId": "vpc-0preview", **samples[aws_objects.VPC_ENDPOINT]}
    samples[aws_objects.IAM_ROLE_POLICY_ATTACHMENT] = {**samples[aws_objects.IAM_ROLE_POLICY_ATTACHMENT], "role": "nodes"}
    requests = capture_requests(monkeypatch)
    twins = evaluate_twins(TWIN_PROGRAM, list(samples.items()), tmp_path, monkeypatch)
    by_name = {r.name: r for r in twins.resources}
    aliased = set()
    for index, token in enumerate(samples):
        generic, typed = by_name[f"generic-{index}"], by_name[f"typed-{index}"]
        assert generic.type == typed.type == token
        # The whole request, its name aside (inputs, options, provider version and download URL, ...): the aliases,
        # which name each side's own resource, compared by type below.
        whole = {side: requests[f"{side}-{index}"] for side in ("generic", "typed")}
        for request in whole.values():
            request.name = ""
            del request.aliases[:]
        assert whole["generic"] == whole["typed"], token
        assert plain(generic.inputs) == plain(typed.inputs), token
        assert sorted(generic.additional_secret_outputs) == sorted(typed.additional_secret_outputs), token
        assert generic.version == typed.version and generic.version, token
        aliases = {side: twins.stack_outputs[f"aliases-{side}-{index}"] for side in ("generic", "typed")}
        # URNs of the alias types, named by each side's own name: compared by type.
        by_type = {side: {urn.split("::")[2] for urn in urns} for side, urns in aliases.items()}
        assert by_type["generic"] == by_type["typed"], token
        aliased |= by_type["typed"]
        if token == aws_objects.LAUNCH_TEMPLATE:
            # The engine sends numbers as floats: the typed class's int, not 1.0 (which the node group would name).
            assert twins.stack_outputs[f"version-generic-{index}"] == twins.stack_outputs[f"version-typed-{index}"] == "1"
    assert aliased == {alias for aliases in aws_objects.TYPE_ALIASES.values() for alias in aliases}


def test_the_tokens_and_aliases_read_pulumi_aws_own_source():
    """The typed classes' registration strings, read from the installed package."""
    import pulumi_aws

    package = Path(pulumi_aws.__file__).parent
    sources = {
        aws_objects.LAUNCH_TEMPLATE: "ec2/launch_template.py",
        aws_objects.VPC_ENDPOINT: "ec2/vpc_endpoint.py",
        aws_objects.S3_BUCKET: "s3/bucket.py",
        aws_objects.S3_PUBLIC_ACCESS_BLOCK: "s3/bucket_public_access_block.py",
        aws_objects.S3_OWNERSHIP_CONTROLS: "s3/bucket_ownership_controls.py",
        aws_objects.S3_ENCRYPTION: "s3/bucket_server_side_encryption_configuration.py",
        aws_objects.S3_LIFECYCLE: "s3/bucket_lifecycle_configuration.py",
        aws_objects.S3_BUCKET_POLICY: "s3/bucket_policy.py",
        aws_objects.EKS_CLUSTER: "eks/cluster.py",
        aws_objects.EKS_NODE_GROUP: "eks/node_group.py",
        aws_objects.EKS_ACCESS_ENTRY: "eks/access_entry.py",
        aws_objects.EKS_ACCESS_POLICY_ASSOCIATION: "eks/access_policy_association.py",
        aws_objects.EKS_ADDON: "eks/addon.py",
        aws_objects.EKS_POD_IDENTITY_ASSOCIATION: "eks/pod_identity_association.py",
        aws_objects.IAM_ROLE: "iam/role.py",
        aws_objects.IAM_ROLE_POLICY: "iam/role_policy.py",
        aws_objects.IAM_ROLE_POLICY_ATTACHMENT: "iam/role_policy_attachment.py",
        aws_objects.IAM_OIDC_PROVIDER: "iam/open_id_connect_provider.py",
        aws_objects.AUTOSCALING_TAG: "autoscaling/tag.py",
    }
    assert set(sources) == GENERIC_TOKENS
    for token, path in sources.items():
        text = (package / path).read_text()
        assert f"'{token}'" in text, token
        for alias in aws_objects.TYPE_ALIASES.get(token, ()):
            assert f'pulumi.Alias(type_="{alias}")' in text, alias
        assert ("alias_opts" in text) == (token in aws_objects.TYPE_ALIASES), token


def test_an_output_not_named_at_registration_is_refused():
    resource = aws_objects.AwsResource.__new__(aws_objects.AwsResource)
    resource._output_types = {"latestVersion": int}
    resource._input_names = frozenset({"tags"})
    with pytest.raises(KeyError, match="'arn' was not named"):
        resource.output("arn")


def test_the_outputs_the_program_reads_reach_what_it_builds_from_them(prod_irsa):
    """What the mock engine answers for the cluster, its roles and node groups (preview/engine.py
    `_computed_outputs`), as the program reads it by the outputs' schema names: the kubeconfig's endpoint and CA, the
    OIDC issuer IRSA trusts, the roles' ARNs, each node group's Auto Scaling group."""
    from preview.render import unsecret

    cluster = prod_irsa.one(aws_objects.EKS_CLUSTER, "cluster-eks")["outputs"]
    issuer = cluster["identities"][0]["oidcs"][0]["issuer"]
    provider = prod_irsa.one(aws_objects.IAM_OIDC_PROVIDER, "cluster-oidc")
    assert provider["inputs"]["url"] == issuer
    # The one Kubernetes provider's, as the program gives it.
    provider_inputs = next(r.inputs for r in prod_irsa.records if r.type == "pulumi:providers:kubernetes")
    kubeconfig = json.loads(unsecret(provider_inputs)["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": cluster["endpoint"],
        "certificate-authority-data": cluster["certificateAuthority"]["data"],
    }
    nodes = prod_irsa.one(aws_objects.EKS_NODE_GROUP, "cluster-system")["inputs"]
    assert nodes["nodeRoleArn"] == prod_irsa.one(aws_objects.IAM_ROLE, "cluster-nodes")["outputs"]["arn"]
    account = prod_irsa.k8s("ServiceAccount", "llama-8b-weights", "serving")
    role = prod_irsa.one(aws_objects.IAM_ROLE, "llama-8b-weights-identity-role")
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == role["outputs"]["arn"]
    trust = json.loads(role["inputs"]["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Federated": provider["outputs"]["arn"]}
    for group in prod_irsa.of_type(aws_objects.EKS_NODE_GROUP):
        if group["name"] == "cluster-system":
            continue
        asg = group["outputs"]["resources"][0]["autoscalingGroups"][0]["name"]
        tags = [t for t in prod_irsa.of_type(aws_objects.AUTOSCALING_TAG) if t["parent"] == group["parent"]]
        assert tags and {t["inputs"]["autoscalingGroupName"] for t in tags} == {asg}
