"""The catalog of CPU instance types for the EKS system node group: its figures are AWS's, every
name is one EC2 (and pulumi-aws) knows, and the system group's instanceType is held to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from platform_config.cpu_instances import CPU_INSTANCE_TYPES
from platform_config.loader import parse_platform_config

from .helpers import config_problems, mirror_show, set_at, write_stack

KEY = "inference-platform:cluster.eks.systemNodeGroup.instanceType"
INSTANCE_TYPE = ("cluster", "eks", "systemNodeGroup", "instanceType")
AUTOSCALER_MIRROR = Path("kubernetes+autoscaler")  # read in ../shared/upstream-sources
AUTOSCALER_TAG = "cluster-autoscaler-1.33.0"
AUTOSCALER_TABLE = "cluster-autoscaler/cloudprovider/aws/ec2_instance_types.go"


# (type, vCPUs, memory GiB) as AWS's instance type specifications list them, one per family
# and the sizes the stacks use; typed in from the tables, not from the catalog's rule.
AWS_SPECS = [
    ("m5.large", 2, 8),
    ("m6i.xlarge", 4, 16),
    ("m6i.2xlarge", 8, 32),
    ("m6a.4xlarge", 16, 64),
    ("m7i.2xlarge", 8, 32),
    ("m7a.16xlarge", 64, 256),
    ("c6i.8xlarge", 32, 64),
    ("c7i.xlarge", 4, 8),
    ("r6i.12xlarge", 48, 384),
    ("r7i.large", 2, 16),
]


@pytest.mark.parametrize("name, vcpus, memory_gib", AWS_SPECS)
def test_the_catalog_has_awss_figures(name: str, vcpus: int, memory_gib: int):
    instance = CPU_INSTANCE_TYPES[name]
    assert (instance.name, instance.vcpus, instance.memory_gib) == (name, vcpus, memory_gib)


def test_the_catalog_agrees_with_the_cluster_autoscalers_table():
    """Every type's vCPUs and memory as the cluster autoscaler's AWS table has them (generated
    from the AWS price list), read from the mirror at a tag."""
    source = mirror_show(AUTOSCALER_MIRROR, AUTOSCALER_TAG, AUTOSCALER_TABLE)
    table = {
        m["name"]: (int(m["vcpu"]), int(m["memory_mb"]))
        for m in re.finditer(r'"(?P<name>[a-z0-9.-]+)": \{\s*InstanceType:\s*"[^"]+",\s*VCPU:\s*(?P<vcpu>\d+),\s*'
                             r"MemoryMb:\s*(?P<memory_mb>\d+)", source)
    }  # fmt: skip
    assert len(table) > 500  # the pattern read the table, not a handful of lines
    disagree = {
        name: (table.get(name), (instance.vcpus, instance.memory_gib * 1024))
        for name, instance in CPU_INSTANCE_TYPES.items()
        if table.get(name) != (instance.vcpus, instance.memory_gib * 1024)
    }
    assert disagree == {}


def test_every_catalog_type_is_one_pulumi_aws_knows():
    from pulumi_aws.ec2._enums import InstanceType

    known = {member.value for member in InstanceType}
    assert sorted(set(CPU_INSTANCE_TYPES) - known) == []


def test_a_system_instance_type_that_is_no_instance_type_is_refused_by_its_shape(prod_raw):
    value = "m6i.xlarge\n"
    set_at(prod_raw, INSTANCE_TYPE, value)
    (message,) = config_problems(prod_raw)
    assert message == f"{KEY}: {value!r} is not an EC2 instance type such as 'm6i.2xlarge'"


@pytest.mark.parametrize("value", ["p9.mega", "p5.48xlarge", "m6i.metal", "t3.medium"])
def test_a_system_instance_type_outside_the_catalog_is_refused(prod_raw, value: str):
    set_at(prod_raw, INSTANCE_TYPE, value)
    (message,) = config_problems(prod_raw)
    assert message.startswith(f"{KEY}: {value!r} is not an EC2 instance type in the system node catalog; allowed: ")
    for allowed in ("m5", "m6i", "m6a", "m7i", "m7a", "c6i", "c7i", "r6i", "r7i", "large", "16xlarge"):
        assert allowed in message


def test_every_catalog_type_is_accepted(prod_raw):
    for name in CPU_INSTANCE_TYPES:
        set_at(prod_raw, INSTANCE_TYPE, name)
        eks = parse_platform_config(prod_raw).cluster.eks
        assert eks is not None and eks.system_node_group.instance_type == name


def test_the_cli_refuses_an_unknown_system_instance_type_with_exit_2(tmp_path, capsys, prod_raw):
    from preview.cli import main

    set_at(prod_raw, INSTANCE_TYPE, "p9.mega")
    stack = write_stack(tmp_path, prod_raw, {"aws:region": "us-east-1"})
    out = tmp_path / "out"
    code = main(["--quiet", "--stack", "test", "--config-file", str(stack), "--out", str(out)])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert f"{KEY}: 'p9.mega' is not an EC2 instance type in the system node catalog; allowed: families m5" in stderr
    assert "Traceback" not in stderr
