"""Benchmark the gateway in a real Envoy (not a test: figures go into the README).

One Envoy (the pinned release, tests/real_envoy.py) runs prod's gateway as istiod builds it, with
three copies of its serving listener that differ only in the filter before the router:
- "no filter": jwt_authn, RBAC and the router only (the client sends the headers the routes match);
- "floor": a Lua filter that only reads the body and finds "model" (bench_filter.py's floor, as an
  Envoy Lua filter: what any body-reading gateway pays);
- "ours": the rendered gateway filter.
Each request is a standard-tier chat completion for the 70B (its servers schedule by priority, so
ours rewrites the body), of 1 KB, 100 KB and 1 MB, with "model" first, after the messages, and after
the messages with the user in the body. The measure is the Envoy process's CPU (user + system,
its threads' run time) per request over a batch, the three variants in turn within each round, so each
ratio comes from the same conditions; the figure is the median over the rounds. CPU is read in
nanoseconds (/proc/<pid>/task/*/schedstat), so a batch of a few dozen large requests is measured
exactly.

    .venv/bin/python benchmarks/bench_gateway.py [--rounds N] [--sizes 1KB,100KB,1MB]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_filter import CASES, Case, chat_body, floor_lua  # noqa: E402
from tests import real_envoy  # noqa: E402
from tests.helpers import Evaluated, raw_stack  # noqa: E402

MODEL = "llama-3.1-70b-instruct"
SIZES = {"1KB": 1 << 10, "100KB": 100 << 10, "1MB": 1 << 20}
ISSUER = "https://login.inference.example.com"
VARIANTS = ("no filter", "floor", "ours")
# The floor as an Envoy Lua filter: read the whole body, find the model's value, set the header.
FLOOR_LUA = floor_lua("envoy_on_request")


def _variant_listeners(config: dict[str, Any], serving_port: int, ports: dict[str, int]) -> None:
    """Adds a copy of the serving listener per variant on `ports[variant]`."""
    listeners = config["static_resources"]["listeners"]
    (serving,) = [lis for lis in listeners if lis["address"]["socket_address"]["port_value"] == serving_port]
    for variant, port in ports.items():
        copied = copy.deepcopy(serving)
        copied["name"] = f"bench-{variant}"
        copied["address"]["socket_address"]["port_value"] = port
        hcm = copied["filter_chains"][0]["filters"][0]["typed_config"]
        filters = hcm["http_filters"]
        lua = next(i for i, f in enumerate(filters) if f["name"] == "envoy.filters.http.lua")
        if variant == "no filter":
            del filters[lua]
        elif variant == "floor":
            filters[lua] = {
                "name": "envoy.filters.http.lua",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                    "default_source_code": {"inline_string": FLOOR_LUA},
                },
            }
        # The copies answer on their own port: the RBAC port rules follow it.
        text = json.dumps(hcm).replace(f'"destination_port": {serving_port}', f'"destination_port": {port}')
        copied["filter_chains"][0]["filters"][0]["typed_config"] = json.loads(text)
        listeners.append(copied)


def run_batch(gateway: real_envoy.Gateway, port: int, body: str, headers: list[tuple[str, str]], n: int) -> float:
    """Envoy CPU seconds per request over n requests on one kept-alive connection."""
    before = gateway.cpu_seconds()
    for _ in range(n):
        response = gateway.request(body=body, headers=headers, server_port=port)
        assert response.status == 200, response.body[:200]
    gateway.upstreams.take()
    return (gateway.cpu_seconds() - before) / n


def measure(rounds: int, sizes: dict[str, int], most: int = 500) -> list[tuple[str, Case, dict[str, float]]]:
    """Per size and case, each variant's median Envoy CPU per request; a batch is at most `most`
    requests (and about 8 MiB of bodies, at least 40 requests)."""
    manifests = Evaluated(raw_stack("prod")).manifests()
    ports: dict[str, int] = {}

    def hook(config: dict[str, Any]) -> None:
        # Ports of their own at each start (the gateway starts again if another process took one first).
        ports.update(zip(VARIANTS, real_envoy.free_ports(len(VARIANTS)), strict=True))
        serving = next(
            lis["address"]["socket_address"]["port_value"]
            for lis in config["static_resources"]["listeners"]
            if lis["name"] == "0.0.0.0_443"
        )
        _variant_listeners(config, serving, ports)

    results = []
    with real_envoy.running_gateway(manifests, bootstrap_hook=hook) as gateway:
        # The variant listeners terminate TLS like the serving one.
        gateway.tls_listeners = frozenset({*gateway.tls_listeners, *ports.values()})
        gateway.bound = {**gateway.bound, **{p: p for p in ports.values()}}
        for label, size in sizes.items():
            for case in CASES:
                body = chat_body(size, case).replace('"llama-3.1-8b-instruct"', f'"{MODEL}"')
                claims = {"iss": ISSUER, "aud": "inference-api", "tenant": "team-a", "tier": "standard", "sub": "user-123"}
                token = real_envoy.signed_token(claims)
                auth = [("authorization", f"Bearer {token}"), ("content-type", "application/json")]
                headers = {
                    "no filter": [*auth, ("x-model", MODEL), ("x-tier", "standard")],
                    "floor": [*auth, ("x-tier", "standard")],
                    "ours": auth,
                }
                n = max(min(40, most), min(most, (8 << 20) // len(body)))
                for variant in VARIANTS:  # warm up
                    run_batch(gateway, ports[variant], body, headers[variant], max(5, n // 10))
                samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
                for _ in range(rounds):
                    for variant in VARIANTS:
                        samples[variant].append(run_batch(gateway, ports[variant], body, headers[variant], n))
                results.append((label, case, {v: statistics.median(s) for v, s in samples.items()}))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--requests", type=int, default=500, help="requests per batch at most")
    args = parser.parse_args()
    sizes = {label: SIZES[label] for label in args.sizes.split(",")}
    version = real_envoy.envoy_version()
    print(f"Gateway in Envoy {version} (prod), Envoy CPU per request, median of {args.rounds} interleaved rounds:\n")
    print("| body | model placement | no filter | floor | ours | ours / floor |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for label, case, cpu in measure(args.rounds, sizes, args.requests):
        print(
            f"| {label} | {case.label} | {cpu['no filter'] * 1e6:.0f} µs | {cpu['floor'] * 1e6:.0f} µs | "
            f"{cpu['ours'] * 1e6:.0f} µs | {cpu['ours'] / cpu['floor']:.2f}x |"
        )


if __name__ == "__main__":
    main()
