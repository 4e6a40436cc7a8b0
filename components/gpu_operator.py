"""The NVIDIA GPU Operator (pinned Helm release) configured for every pool's GPU sharing:
the mig-parted config for MIG pools, the device-plugin configs for time-slicing, and a
ServiceMonitor so DCGM's GPU metrics reach Prometheus."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import yaml

from platform_config.chart_images import ChartImageValues
from platform_config.pins import GPU_OPERATOR

from .constants import GPU_OPERATOR_NAMESPACE, PACKAGE, PRIVILEGED
from .k8s_objects import KubernetesObject, custom_resource, helm_release, system_namespace
from .pool_plan import PoolPlan
from .specs.gpu_memory import declared_mig_instances, gpu_memory_prometheus_rule
from .specs.gpu_operator import (
    DEVICE_PLUGIN_CONFIGMAP,
    MIG_PARTED_CONFIGMAP,
    config_map,
    dcgm_service_monitor,
    gpu_operator_values,
)
from .specs.gpu_sharing import device_plugin_configs, mig_parted_config


@dataclass(frozen=True)
class GpuOperatorArgs:
    # The GPU pools' slices of the plan.
    pools: tuple[PoolPlan, ...]
    # The ServiceMonitor CRD comes with the Prometheus Operator; wait for it.
    monitoring: pulumi.Resource | None = None
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class GpuOperator(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:gpu-operator:GpuOperator", name, None, opts)
        pools = [pool_plan.pool for pool_plan in args.pools]
        # The operator's daemonsets need host access (device nodes, kubelet sockets).
        namespace = system_namespace(
            f"{name}-namespace", GPU_OPERATOR_NAMESPACE, "gpu-operator", pulumi.ResourceOptions(parent=self), **PRIVILEGED
        )
        inside = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        mig_config = KubernetesObject(
            f"{name}-mig-parted-config",
            config_map(MIG_PARTED_CONFIGMAP, {"config.yaml": yaml.safe_dump(mig_parted_config(pools), sort_keys=False)}),
            inside,
        )
        plugin_config = KubernetesObject(
            f"{name}-device-plugin-config", config_map(DEVICE_PLUGIN_CONFIGMAP, device_plugin_configs(pools)), inside
        )
        release = helm_release(
            f"{name}-release",
            "gpu-operator",
            GPU_OPERATOR_NAMESPACE,
            GPU_OPERATOR,
            gpu_operator_values(),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace, mig_config, plugin_config]),
            chart_image_values=args.chart_image_values,
        )
        monitor_deps: list[pulumi.Resource] = [release] + ([args.monitoring] if args.monitoring else [])
        custom_resource(
            f"{name}-dcgm-service-monitor",
            dcgm_service_monitor(GPU_OPERATOR_NAMESPACE),
            pulumi.ResourceOptions(parent=self, depends_on=monitor_deps),
        )
        # GPU memory per device and the MIG geometry the nodes report (the PrometheusRule CRD is the Prometheus
        # Operator's too).
        custom_resource(
            f"{name}-gpu-memory-rule",
            gpu_memory_prometheus_rule(declared_mig_instances(args.pools)),
            pulumi.ResourceOptions(parent=self, depends_on=monitor_deps),
        )
        self.release = release
        self.register_outputs({"chart": GPU_OPERATOR.chart, "version": GPU_OPERATOR.version})
