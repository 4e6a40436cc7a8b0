"""Traffic: Istio routes, canaries with header override and sticky buckets (their RE2 ranges, and the
shares they give the filter's buckets), request tiers, isolation. The gateway filter itself, its real Lua
run in LuaJIT: tests/test_gateway_filter.py."""

from __future__ import annotations

import pytest
import re2

from components.specs.routes import range_regex, sticky_ranges
from platform_config import parse_platform_config
from platform_config.serving import model_tiers, served_tiers

from .helpers import Evaluated, config_problems, prod_with_labeller_server, raw_stack, split_module_value
from .lua_filter import N_KEYS, lua_runtime, token

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return split_module_value("tests/test_traffic.py prod", lambda: Evaluated(prod_with_labeller_server(), shared=True))


@pytest.fixture(scope="module")
def staging() -> Evaluated:
    return Evaluated(raw_stack("staging"), shared=True)


def vs(evaluated: Evaluated, model: str, namespace: str) -> dict:
    return evaluated.k8s("VirtualService", model, namespace)


# --- RE2 bucket ranges ------------------------------------------------------------------------


def test_bucket_regexes_match_exactly_the_intended_buckets_for_every_weight():
    buckets = [str(b) for b in range(100)]
    for weight in range(101):
        canary, stable = sticky_ranges(weight)
        for pattern, wanted in ((canary, set(range(weight))), (stable, set(range(weight, 100)))):
            if not wanted:
                assert pattern is None, weight
                continue
            compiled = re2.compile(pattern)
            matched = {int(b) for b in buckets if compiled.fullmatch(b)}
            assert matched == wanted, (weight, pattern)
            # Never matches anything but a bucket (full match, as Envoy applies it).
            for other in ("", "-1", "100", "07", "5 ", "1a"):
                assert not compiled.fullmatch(other), (pattern, other)


def test_range_regex_shapes():
    assert range_regex(0, 9) == "[0-9]"
    assert range_regex(10, 99) == "[1-9][0-9]"
    assert range_regex(0, 24) == "([0-9]|1[0-9]|2[0-4])"
    assert range_regex(5, 5) == "5"


@pytest.fixture(scope="module")
def lua(prod):
    return lua_runtime(prod)


def test_prod_canary_route_regex_applied_to_lua_buckets_gives_ten_percent(lua, prod):
    routes = vs(prod, "llama-8b", "serving")["spec"]["http"]
    sticky = next(r for r in routes if r["name"] == "premium-sticky-v2")
    pattern = re2.compile(sticky["match"][0]["headers"]["x-user-bucket"]["regex"])
    counts = lua.globals().bucket_counts(N_KEYS)
    canary = sum(counts[b] for b in range(100) if pattern.fullmatch(str(b)))
    assert abs(100 * canary / N_KEYS - 10) <= 1


# The sticky user from the body: a client that only sends OpenAI's `user` stays on one version.


def test_body_user_shares_over_100k_users_are_within_one_point_of_every_weight(lua, prod):
    no_user_claim = lua.table_from(token(sub=None))
    counts = lua.globals().body_user_bucket_counts(N_KEYS, "llama-3.1-8b-instruct", no_user_claim)
    buckets = [counts[b] for b in range(100)]
    assert sum(buckets) == N_KEYS
    for weight in range(101):
        assert abs(100 * sum(buckets[:weight]) / N_KEYS - weight) <= 1, weight
    # The prod canary's route regex over those buckets: its 10%.
    sticky = next(r for r in vs(prod, "llama-8b", "serving")["spec"]["http"] if r["name"] == "premium-sticky-v2")
    pattern = re2.compile(sticky["match"][0]["headers"]["x-user-bucket"]["regex"])
    assert abs(100 * sum(counts[b] for b in range(100) if pattern.fullmatch(str(b))) / N_KEYS - 10) <= 1
    # A user named in the body lands where the same user named by a token does.
    claimed = lua.globals().bucket_counts(N_KEYS)
    assert buckets == [claimed[b] for b in range(100)]


# --- the VirtualServices and DestinationRules -------------------------------------------------


def route_kinds(routes: list[dict]) -> list[str]:
    return ["override" if "-override-" in r["name"] else "sticky" if "-sticky-" in r["name"] else "other" for r in routes]


def test_route_order_override_then_sticky_then_weighted(prod):
    routes = vs(prod, "llama-8b", "serving")["spec"]["http"]
    kinds = route_kinds(routes)
    first_sticky, last_override = kinds.index("sticky"), len(kinds) - 1 - kinds[::-1].index("override")
    assert last_override < first_sticky
    assert kinds.index("other") > len(kinds) - 1 - kinds[::-1].index("sticky")
    override = next(r for r in routes if r["name"] == "premium-override-v2")
    headers = override["match"][0]["headers"]
    assert headers["x-model-version"] == {"exact": "v2"}
    assert headers["x-model"] == {"exact": "llama-3.1-8b-instruct"} and headers["x-tier"] == {"exact": "premium"}
    assert override["route"][0]["destination"]["subset"] == "llama-8b-v2-premium"


def test_weights_add_up_to_100(prod):
    for model, namespace in (
        ("llama-8b", "serving"),
        ("llama-70b", "serving"),
        ("llama-1b", "team-a"),
        ("batch-labeller", "team-b"),
    ):
        for route in vs(prod, model, namespace)["spec"]["http"]:
            if "route" in route:
                weights = [d.get("weight", 100) for d in route["route"]]
                assert sum(weights) == 100, (model, route["name"])
    weighted = next(r for r in vs(prod, "llama-8b", "serving")["spec"]["http"] if r["name"] == "standard-weighted")
    assert [(d["destination"]["subset"], d["weight"]) for d in weighted["route"]] == [
        ("llama-8b-v1-standard", 90),
        ("llama-8b-v2-standard", 10),
    ]


def test_every_destination_subset_exists(prod):
    rules = [m for m in prod.manifests() if m["kind"] == "DestinationRule"]
    subsets = {(r["spec"]["host"], s["name"]) for r in rules for s in r["spec"].get("subsets", [])}
    for service in (m for m in prod.manifests() if m["kind"] == "VirtualService"):
        # HTTP routes (the tiers'), and TLS ones (a tenant's hosts through the egress gateway).
        for route in [*service["spec"].get("http", []), *service["spec"].get("tls", [])]:
            for destination in route.get("route", []):
                d = destination["destination"]
                assert "subset" not in d or (d["host"], d["subset"]) in subsets, (service["metadata"]["name"], d)


def test_knative_versions_are_reached_through_their_pickers_or_the_local_gateway_by_host(prod, staging):
    # Behind its pickers (the default), a Knative version is reached as an HPA one is: the version's picker,
    # in the tier's band, with subsets of its own in the model's namespace.
    weighted = next(r for r in vs(prod, "llama-8b", "serving")["spec"]["http"] if r["name"] == "premium-weighted")
    stable = weighted["route"][0]
    assert stable["destination"] == {
        "host": "llama-8b-v1-epp.serving.svc.cluster.local",
        "subset": "llama-8b-v1-premium",
        "port": {"number": 8081},
    }
    assert stable["headers"]["request"]["set"] == {"x-llm-d-inference-objective": "llama-8b-v1-premium"}
    rule = prod.k8s("DestinationRule", "llama-8b-v2-epp", "serving")
    assert {s["name"] for s in rule["spec"]["subsets"]} == {"llama-8b-v2-premium", "llama-8b-v2-standard"}
    # Without one (staging's labeller, which scales to zero), through Knative's local gateway by Host.
    weighted = next(r for r in vs(staging, "labeller", "team-a")["spec"]["http"] if r["name"] == "batch-weighted")
    stable = weighted["route"][0]
    assert stable["destination"]["host"] == "knative-local-gateway.istio-system.svc.cluster.local"
    assert stable["headers"]["request"]["set"]["Host"] == "labeller-v1.team-a.svc.cluster.local"
    rule = staging.k8s("DestinationRule", "knative-model-tiers", "istio-system")
    assert [s["name"] for s in rule["spec"]["subsets"]] == ["labeller-v1-batch"]


def test_tier_limits_timeouts_and_safe_retries(prod):
    # The 70B's versions sit behind endpoint pickers: each version's tier subsets are its
    # picker's pods, with the tier's connection-pool bounds, and eject nothing.
    rule = prod.k8s("DestinationRule", "llama-70b-v1-epp", "serving")
    assert rule["spec"]["host"] == "llama-70b-v1-epp.serving.svc.cluster.local"
    subsets = {s["name"]: s for s in rule["spec"]["subsets"]}
    assert set(subsets) == {"v1-premium", "v1-standard"}  # chat: premium and standard
    premium = subsets["v1-premium"]
    assert premium["labels"] == {"llm-d-router-gateway": "llama-70b-v1-epp"}
    pool = premium["trafficPolicy"]["connectionPool"]
    assert pool["http"]["http1MaxPendingRequests"] == 64 and pool["http"]["http2MaxRequests"] == 512
    assert subsets["v1-standard"]["trafficPolicy"]["connectionPool"]["http"]["http1MaxPendingRequests"] == 32
    assert all("outlierDetection" not in s["trafficPolicy"] for s in subsets.values())
    routes = {r["name"]: r for r in vs(prod, "llama-70b", "serving")["spec"]["http"]}
    assert routes["premium-weighted"]["timeout"] == "120s" and routes["standard-weighted"]["timeout"] == "300s"
    assert routes["premium-weighted"]["retries"] == {
        "attempts": 1,
        "perTryTimeout": "120s",
        "retryOn": "connect-failure,refused-stream",
    }
    batch = next(r for r in vs(prod, "batch-labeller", "team-b")["spec"]["http"] if r["name"] == "batch-weighted")
    assert batch["retries"] == {"attempts": 0} and batch["timeout"] == "600s"


def test_knative_gateway_subsets_eject_no_hosts(staging):
    # Finding 10: behind knative-local-gateway the hosts are gateway pods, not model servers.
    rule = staging.k8s("DestinationRule", "knative-model-tiers", "istio-system")
    assert rule["spec"]["subsets"]
    for subset in rule["spec"]["subsets"]:
        assert "outlierDetection" not in subset["trafficPolicy"] and subset["trafficPolicy"]["connectionPool"]


def test_tiers_a_model_does_not_serve_get_a_clear_403(prod):
    last = vs(prod, "llama-70b", "serving")["spec"]["http"][-1]
    assert last["directResponse"]["status"] == 403
    assert last["directResponse"]["body"]["string"] == (
        "model llama-3.1-70b-instruct serves tiers premium, standard; the token's tier claim names another"
    )


def test_batch_traffic_goes_to_its_own_pool(prod):
    routes = {r["name"]: r for r in vs(prod, "llama-8b", "serving")["spec"]["http"]}
    batch = routes["batch-to-llama-8b-batch"]
    assert batch["route"][0]["destination"]["host"] == "llama-8b-batch-v1-epp.serving.svc.cluster.local"
    assert not any(name.startswith("batch-override") for name in routes)
    servers = prod.k8s("Service", "llama-8b-batch-v1", "serving")
    args = servers["spec"]["template"]["spec"]["containers"][0]["args"]
    # The batch servers answer to the chat model's name too.
    assert args[args.index("--served-model-name") + 1 : args.index("--served-model-name") + 3] == [
        "llama-3.1-8b-instruct-batch",
        "llama-3.1-8b-instruct",
    ]
    assert servers["spec"]["template"]["spec"]["nodeSelector"] == {"inference.platform/pool": "l4-batch"}


def test_gateway_and_filter(prod):
    gateway = prod.k8s("Gateway", "inference-gateway", "istio-system")
    assert gateway["spec"]["selector"] == {"istio": "ingressgateway"}
    https = gateway["spec"]["servers"][0]
    assert https["tls"] == {"mode": "SIMPLE", "credentialName": "inference-api-tls"} and https["hosts"] == [
        "api.inference.example.com"
    ]
    envoy_filter = prod.k8s("EnvoyFilter", "inference-gateway-filter", "istio-system")
    patches = {p["applyTo"]: p for p in envoy_filter["spec"]["configPatches"]}
    lua = patches["HTTP_FILTER"]
    assert lua["match"]["context"] == "GATEWAY" and lua["patch"]["operation"] == "INSERT_BEFORE"
    assert lua["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"] == "envoy.filters.http.router"
    # The filter buffers bodies: the listener buffer allows 16 MiB; silent responses may last
    # as long as the longest tier timeout.
    assert patches["LISTENER"]["patch"]["value"] == {"per_connection_buffer_limit_bytes": 16 << 20}
    assert patches["NETWORK_FILTER"]["patch"]["value"]["typed_config"]["stream_idle_timeout"] == "630s"


def test_istio_installed_by_pinned_releases(prod):
    releases = {r["inputs"]["name"]: r["inputs"] for r in prod.of_type(RELEASE)}
    for name, chart in (("istio-base", "base"), ("istio-cni", "cni"), ("istiod", "istiod"), ("istio-ingressgateway", "gateway")):
        # Finding 3: 1.30.3 is the newest 1.30 release (1.30.4 was never tagged).
        assert releases[name]["chart"] == chart and releases[name]["version"] == "1.30.3"
        assert releases[name]["repositoryOpts"]["repo"] == "https://istio-release.storage.googleapis.com/charts"
    assert releases["istiod"]["values"]["pilot"]["cni"]["enabled"] is True
    assert releases["istio-ingressgateway"]["values"]["labels"]["istio"] == "ingressgateway"
    # Finding 13: the chart's default 2000m CPU limit is dropped (its helper omits empty values).
    assert releases["istio-ingressgateway"]["values"]["resources"]["limits"] == {"cpu": "", "memory": "1Gi"}


def test_isolation_policies(prod):
    for tenant in ("serving", "team-a", "team-b"):
        assert prod.k8s("PeerAuthentication", "default", tenant)["spec"] == {"mtls": {"mode": "STRICT"}}
    policy = prod.k8s("AuthorizationPolicy", "allow-gateway-and-namespace", "team-a")["spec"]
    assert policy["action"] == "ALLOW"
    assert policy["rules"] == [
        {"from": [{"source": {"principals": ["cluster.local/ns/istio-system/sa/istio-ingressgateway"]}}]},
        {"from": [{"source": {"namespaces": ["team-a"]}}]},
    ]
    # A Knative tenant admits Knative's activator by its service account, not all of knative-serving.
    knative_tenant = prod.k8s("AuthorizationPolicy", "allow-gateway-and-namespace", "serving")["spec"]
    assert knative_tenant["rules"][1] == {"from": [{"source": {"namespaces": ["serving"]}}]}
    sources = [source["source"] for rule in knative_tenant["rules"] for source in rule["from"]]
    assert {"principals": ["cluster.local/ns/knative-serving/sa/activator"]} in sources
    assert not any("knative-serving" in source.get("namespaces", []) for source in sources)


def test_promotion_then_dropping_the_old_version(prod_raw):
    release = prod_raw["models"][1]["release"]
    release["canaryWeight"] = 100
    promoted = Evaluated(prod_raw)
    weighted = next(r for r in vs(promoted, "llama-8b", "serving")["spec"]["http"] if r["name"] == "premium-weighted")
    assert [(d["destination"]["subset"], d["weight"]) for d in weighted["route"]] == [
        ("llama-8b-v1-premium", 0),
        ("llama-8b-v2-premium", 100),
    ]
    prod_raw["models"][1]["release"] = {"stable": "v2"}
    prod_raw["models"][1]["versions"] = prod_raw["models"][1]["versions"][1:]
    done = Evaluated(prod_raw)
    servers = {r["name"] for r in done.of_type("inference-platform:model-server:ModelServer")}
    assert "llama-8b-v1" not in servers and "llama-8b-v2" in servers


# --- bad inputs ---------------------------------------------------------------------------------


def test_weights_that_do_not_add_up(prod_raw):
    release = prod_raw["models"][1]["release"]
    del release["canaryWeight"]
    release["weights"] = {"v1": 85, "v2": 10}
    (message,) = config_problems(prod_raw)
    assert message == "inference-platform:models[1].release: weights add up to 95, not 100: v1=85, v2=10"


def test_weights_that_add_up_set_the_canary_weight(prod_raw):
    release = prod_raw["models"][1]["release"]
    del release["canaryWeight"]
    release["weights"] = {"v1": 75, "v2": 25}
    assert parse_platform_config(prod_raw).models[1].release.canary_weight == 25


def test_canary_naming_a_missing_version(prod_raw):
    prod_raw["models"][1]["release"]["canary"] = "v9"
    (message,) = config_problems(prod_raw)
    assert message.startswith("inference-platform:models[1].release.canary: version 'v9' is not among the model's versions")


def test_unknown_tier_on_a_model(prod_raw):
    prod_raw["models"][0]["tiers"] = ["premium", "gold"]
    (message,) = config_problems(prod_raw)
    assert message.startswith("inference-platform:models[0].tiers[1]: got 'gold'; allowed: 'premium', 'standard' or 'batch'")


def test_unknown_tier_in_traffic_policy(prod_raw):
    prod_raw["traffic"]["tiers"] = {
        "gold": {"timeout": "5s", "maxPendingRequests": 1, "maxRequests": 1, "retryAttempts": 0, "vllmPriority": 0}
    }
    found = config_problems(prod_raw)
    assert any(m.startswith("inference-platform:traffic.tiers.gold") for m in found), found


def test_served_tiers_read_the_batch_senders_of_the_config_they_are_asked_of(prod_raw):
    """The models sending their batch tier to each model are found once per config (`batch_senders`), and a copy of
    the config with other models (the registry's resolution makes one) finds its own: in prod llama-8b sends its
    batch tier to llama-8b-batch, which a copy without llama-8b no longer hears from."""
    config = parse_platform_config(prod_raw)
    receivers = {m.name: m.batch_model for m in config.models if m.batch_model is not None}
    assert receivers == {"llama-8b": "llama-8b-batch"}
    assert config.batch_senders["llama-8b-batch"] == (config.models_by_name["llama-8b"],)
    assert served_tiers(config, config.models_by_name["llama-8b"]) == ("premium", "standard")
    copied = config.model_copy(update={"models": [m for m in config.models if m.name != "llama-8b"]})
    assert "llama-8b-batch" not in copied.batch_senders and "llama-8b" not in copied.models_by_name
    assert served_tiers(copied, copied.models_by_name["llama-8b-batch"]) == model_tiers(
        copied, copied.models_by_name["llama-8b-batch"]
    )
    for model in config.models:
        scanned = tuple(m for m in config.models if m.batch_model == model.name)
        assert config.batch_senders.get(model.name, ()) == scanned


def test_batch_model_must_exist_and_serve_batch(prod_raw):
    prod_raw["models"][1]["batchModel"] = "llama-70b"
    (message,) = config_problems(prod_raw)
    assert message.startswith("inference-platform:models[1].batchModel: model 'llama-70b' does not serve the batch tier")
    prod_raw["models"][1]["batchModel"] = "nope"
    assert config_problems(prod_raw)[0].startswith("inference-platform:models[1].batchModel: unknown model 'nope'")
