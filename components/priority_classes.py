"""The two PriorityClasses every GPU workload chooses between."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi

from .constants import PACKAGE
from .k8s_objects import KubernetesObject
from .specs import tenancy


class PriorityClasses(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        # Pods naming a class that does not exist yet are refused at admission: they wait for these.
        classes: list[KubernetesObject]

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:priority-classes:PriorityClasses", name, None, opts)
        specs = tenancy.priority_classes()
        self.classes = [KubernetesObject(spec["metadata"]["name"], spec, pulumi.ResourceOptions(parent=self)) for spec in specs]
        self.register_outputs({"priorityClasses": [spec["metadata"]["name"] for spec in specs]})
