"""Benchmark baseline: register exactly the resources of a recorded preview, flat.

Reads the resources.json named by BENCH_RESOURCES and registers every resource it records, in
one loop, with the very same type token, name, parent and inputs, under the same mock engine:
the provider as a provider, each component as a bare `ComponentResource` of its recorded type
(no component class, no args model, no child logic), each custom resource with the recorded
package's provider. No config parsing and no components' code: the floor the real program's
evaluation is measured against. The preview run over this program records the very same URNs
(tests/test_benchmark_baseline.py checks that).

BENCH_CUSTOM_ONLY=1 registers the custom resources alone, without parents or providers (the
stricter floor the README also reports).
"""

import json
import os

import pulumi
from pulumi.runtime import rpc

STACK_TYPE = "pulumi:pulumi:Stack"
PROVIDER_PREFIX = "pulumi:providers:"


def revive(value):
    # resources.json writes a value unknown at preview as null: send it as the engine's unknown.
    if value is None:
        return rpc.UNKNOWN
    if isinstance(value, dict):
        if value.get("secret") is True and set(value) == {"secret", "value"}:
            return pulumi.Output.secret(revive(value["value"]))
        return {k: revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [revive(v) for v in value]
    return value


def register_all(recorded):
    # resources.json lists parents before their children (ordered by depth, then URN).
    registered: dict[str, pulumi.Resource] = {}
    providers: dict[str, pulumi.ProviderResource] = {}
    for entry in recorded:
        type_token, name, inputs = entry["type"], entry["name"], revive(entry["inputs"])
        if type_token == STACK_TYPE:
            continue
        parent = registered.get(entry["parent"])
        resource: pulumi.Resource
        if type_token.startswith(PROVIDER_PREFIX):
            package = type_token[len(PROVIDER_PREFIX) :]
            providers[package] = pulumi.ProviderResource(package, name, inputs, pulumi.ResourceOptions(parent=parent))
            resource = providers[package]
        elif entry["custom"]:
            provider = providers.get(type_token.split(":", 1)[0])
            resource = pulumi.CustomResource(type_token, name, inputs, pulumi.ResourceOptions(parent=parent, provider=provider))
        else:
            resource = pulumi.ComponentResource(type_token, name, inputs or None, pulumi.ResourceOptions(parent=parent))
        registered[entry["urn"]] = resource


def register_custom_only(recorded):
    seen = set()
    for entry in recorded:
        if not entry["custom"] or entry["type"].startswith(PROVIDER_PREFIX):
            continue
        name = entry["name"]
        while (entry["type"], name) in seen:
            name += "-dup"
        seen.add((entry["type"], name))
        pulumi.CustomResource(entry["type"], name, revive(entry["inputs"]))


with open(os.environ["BENCH_RESOURCES"]) as handle:
    resources = json.load(handle)

if os.environ.get("BENCH_CUSTOM_ONLY") == "1":
    register_custom_only(resources)
else:
    register_all(resources)
