"""Benchmark baseline: register exactly the resources of a recorded preview, flat.

Reads the resources.json named by BENCH_RESOURCES and registers every custom resource with
the very same type token and inputs, under the same mock engine, with no config parsing, no
components and no parents: the floor the real program's evaluation is measured against.
"""

import json
import os

import pulumi

PROVIDER_PREFIX = "pulumi:providers:"


def revive(value):
    if isinstance(value, dict):
        if value.get("secret") is True and set(value) == {"secret", "value"}:
            return pulumi.Output.secret(revive(value["value"]))
        return {k: revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [revive(v) for v in value]
    return value


with open(os.environ["BENCH_RESOURCES"]) as handle:
    recorded = json.load(handle)

seen = set()
for entry in recorded:
    if not entry["custom"] or entry["type"].startswith(PROVIDER_PREFIX):
        continue
    name = entry["name"]
    while (entry["type"], name) in seen:
        name += "-dup"
    seen.add((entry["type"], name))
    pulumi.CustomResource(entry["type"], name, revive(entry["inputs"]))
