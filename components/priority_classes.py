"""The two PriorityClasses every GPU workload chooses between."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from .constants import PACKAGE
from .specs import kube, tenancy


class PriorityClasses(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:priority-classes:PriorityClasses", name, None, opts)
        names = []
        for spec in tenancy.priority_classes():
            k8s.scheduling.v1.PriorityClass(spec["metadata"]["name"], **kube.kwargs(spec), opts=pulumi.ResourceOptions(parent=self))
            names.append(spec["metadata"]["name"])
        self.names = names
        self.register_outputs({"priorityClasses": names})
