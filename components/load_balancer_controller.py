"""The AWS Load Balancer Controller (pinned Helm release, least-privilege role): it provisions
the ingress gateway's NLB and, unlike the in-tree cloud provider, applies NLB listener
attributes, so the listeners' TCP idle timeout (350 s by default, which drops a silent answer
to a long batch request) can be raised to outlast the gateway's own stream idle timeout."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi

from platform_config.chart_images import ChartImageValues
from platform_config.pins import AWS_LOAD_BALANCER_CONTROLLER

from .constants import KUBE_SYSTEM_NAMESPACE, PACKAGE, SYSTEM_NODE_SELECTOR
from .k8s_objects import HelmRelease, helm_release
from .workload_identity import WorkloadAccess, WorkloadIdentity, WorkloadIdentityArgs

SERVICE_ACCOUNT = "aws-load-balancer-controller"
CLUSTER_TAG = "elbv2.k8s.aws/cluster"


def _statement(actions: list[str], resource: str | list[str] = "*", condition: dict[str, Any] | None = None) -> dict[str, Any]:
    statement: dict[str, Any] = {"Effect": "Allow", "Action": actions, "Resource": resource}
    if condition:
        statement["Condition"] = condition
    return statement


def controller_policy() -> str:
    """What the controller needs to run Network Load Balancers for Services, after the
    controller's own policy (kubernetes-sigs/aws-load-balancer-controller v3.5.0
    docs/install/iam_policy.json), without the ALB-only parts (WAF, Shield, Cognito, ACM,
    listener rules and certificates): the platform uses it for the gateway's NLB alone. Writes
    are limited to load balancers, target groups and security groups it tagged as its own.
    Long because it is one policy document, statement by statement in the order of upstream's
    iam_policy.json, so that it reads side by side with that file."""
    owned = {"Null": {f"aws:ResourceTag/{CLUSTER_TAG}": "false"}}
    tagging_new = {"Null": {f"aws:RequestTag/{CLUSTER_TAG}": "false"}}
    retag_owned = {"Null": {f"aws:RequestTag/{CLUSTER_TAG}": "true", f"aws:ResourceTag/{CLUSTER_TAG}": "false"}}
    load_balancers = [
        "arn:aws:elasticloadbalancing:*:*:targetgroup/*/*",
        "arn:aws:elasticloadbalancing:*:*:loadbalancer/net/*/*",
    ]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                _statement(
                    ["iam:CreateServiceLinkedRole"],
                    condition={"StringEquals": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}},
                ),
                _statement(
                    [
                        "ec2:DescribeAccountAttributes",
                        "ec2:DescribeAddresses",
                        "ec2:DescribeAvailabilityZones",
                        "ec2:DescribeInternetGateways",
                        "ec2:DescribeVpcs",
                        "ec2:DescribeVpcPeeringConnections",
                        "ec2:DescribeSubnets",
                        "ec2:DescribeSecurityGroups",
                        "ec2:DescribeInstances",
                        "ec2:DescribeNetworkInterfaces",
                        "ec2:DescribeTags",
                        "ec2:DescribeRouteTables",
                        "ec2:GetSecurityGroupsForVpc",
                        "elasticloadbalancing:DescribeLoadBalancers",
                        "elasticloadbalancing:DescribeLoadBalancerAttributes",
                        "elasticloadbalancing:DescribeListeners",
                        "elasticloadbalancing:DescribeListenerAttributes",
                        "elasticloadbalancing:DescribeTargetGroups",
                        "elasticloadbalancing:DescribeTargetGroupAttributes",
                        "elasticloadbalancing:DescribeTargetHealth",
                        "elasticloadbalancing:DescribeTags",
                        "elasticloadbalancing:DescribeCapacityReservation",
                    ]
                ),
                _statement(["ec2:CreateSecurityGroup"]),
                _statement(
                    ["ec2:CreateTags"],
                    "arn:aws:ec2:*:*:security-group/*",
                    {"StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"}, **tagging_new},
                ),
                _statement(["ec2:CreateTags", "ec2:DeleteTags"], "arn:aws:ec2:*:*:security-group/*", retag_owned),
                _statement(["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"]),
                _statement(["ec2:DeleteSecurityGroup"], condition=owned),
                _statement(
                    ["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"], condition=tagging_new
                ),
                _statement(
                    [
                        "elasticloadbalancing:CreateListener",
                        "elasticloadbalancing:DeleteListener",
                        "elasticloadbalancing:ModifyListener",
                    ]
                ),
                _statement(
                    ["elasticloadbalancing:AddTags"],
                    load_balancers,
                    {
                        "StringEquals": {"elasticloadbalancing:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"]},
                        **tagging_new,
                    },
                ),
                _statement(["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"], load_balancers, retag_owned),
                _statement(
                    ["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"],
                    "arn:aws:elasticloadbalancing:*:*:listener/net/*/*/*",
                ),
                _statement(
                    [
                        "elasticloadbalancing:ModifyLoadBalancerAttributes",
                        "elasticloadbalancing:SetIpAddressType",
                        "elasticloadbalancing:SetSecurityGroups",
                        "elasticloadbalancing:SetSubnets",
                        "elasticloadbalancing:DeleteLoadBalancer",
                        "elasticloadbalancing:ModifyTargetGroup",
                        "elasticloadbalancing:ModifyTargetGroupAttributes",
                        "elasticloadbalancing:DeleteTargetGroup",
                        "elasticloadbalancing:ModifyListenerAttributes",
                        "elasticloadbalancing:ModifyCapacityReservation",
                    ],
                    condition=owned,
                ),
                _statement(
                    ["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"],
                    "arn:aws:elasticloadbalancing:*:*:targetgroup/*/*",
                ),
            ],
        }
    )


@dataclass(frozen=True)
class LoadBalancerControllerArgs:
    cluster_name: str
    region: pulumi.Input[str]
    # The controller reads it from instance metadata otherwise, which pods should not reach.
    vpc_id: pulumi.Input[str]
    access: WorkloadAccess
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class LoadBalancerController(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        release: HelmRelease

    def __init__(self, name: str, args: LoadBalancerControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:load-balancer-controller:LoadBalancerController", name, None, opts)
        identity = WorkloadIdentity(
            f"{name}-identity",
            WorkloadIdentityArgs(args.access, KUBE_SYSTEM_NAMESPACE, SERVICE_ACCOUNT, controller_policy()),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.release = helm_release(
            f"{name}-release",
            "aws-load-balancer-controller",
            KUBE_SYSTEM_NAMESPACE,
            AWS_LOAD_BALANCER_CONTROLLER,
            {
                "clusterName": args.cluster_name,
                "region": args.region,
                "vpcId": args.vpc_id,
                "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT, "annotations": identity.service_account_annotations},
                "nodeSelector": SYSTEM_NODE_SELECTOR,
                # No Service webhook. The chart's default registers `mservice.elbv2.k8s.aws` with
                # failurePolicy Fail for every Service of the cluster (kubernetes-sigs/aws-load-balancer-
                # controller v3.5.0 helm/aws-load-balancer-controller/templates/webhook.yaml, values.yaml
                # `enableServiceMutatorWebhook: true`, `serviceMutatorWebhookConfig.failurePolicy: Fail`),
                # only to make the controller the default for LoadBalancer Services: on a first `pulumi up`
                # any Service created before the controller is ready (a chart's, a model's) would be
                # refused. The platform's one LoadBalancer Service, the gateway's, names the controller
                # itself (`aws-load-balancer-type: external` with an NLB target type: docs/guide/service/
                # nlb.md at v3.5.0, "the LBC takes charge"), and waits for it. Of the chart's other webhooks
                # (templates/webhook.yaml), those with failurePolicy Fail match pods only in namespaces or
                # with labels the platform never sets, and every Ingress and TargetGroupBinding, which the
                # platform never creates.
                "enableServiceMutatorWebhook": False,
            },
            pulumi.ResourceOptions(parent=self, depends_on=[identity]),
            chart_image_values=args.chart_image_values,
        )
        self.register_outputs({"roleArn": identity.role_arn})
