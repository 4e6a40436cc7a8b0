"""LoRA adapters on a shared base model: the config, vLLM's LoRA flags sized from the adapters,
the fetch of each pinned revision, routing (the real gateway filter in LuaJIT, the routes'
patterns in RE2), the adapter canary and the memory estimate. Every config error:
tests/test_lora_adapter_config.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import re2

from components.specs.vllm_parts import ADAPTERS_DIR
from platform_config import parse_platform_config
from platform_config.adapters import lora_elements_per_rank, lora_limits, lora_memory
from platform_config.models import VLLM_MAX_LORA_RANKS

from .helpers import (
    Evaluated,
    config_problems,
    downloading_weights,
    owning,
    pinned_vllm_flags,
    raw_stack,
    resolved_from_lock,
    validate,
)
from .lora_helpers import BASE, BATCH, SQL, SUPPORT, adapters
from .lua_filter import Request, lua_runtime, token

N_USERS = 20_000


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(raw_stack("prod"), shared=True)


@pytest.fixture(scope="module")
def lua(prod):
    return lua_runtime(prod)


def server_args(evaluated: Evaluated, name: str) -> list[str]:
    service = evaluated.k8s("Service", name, "serving")
    return service["spec"]["template"]["spec"]["containers"][0]["args"]


def flag_values(args: list[str], flag: str) -> list[str]:
    """The values after `flag` up to the next flag."""
    start = args.index(flag) + 1
    end = next((i for i in range(start, len(args)) if args[i].startswith("--")), len(args))
    return args[start:end]


# --- vLLM's LoRA flags and the fetch of each revision ------------------------------------------


def test_every_version_of_the_base_loads_every_adapter_module_with_limits_sized_from_them(prod):
    for version in ("v1", "v2"):
        args = server_args(prod, f"llama-8b-{version}")
        assert "--enable-lora" in args
        assert flag_values(args, "--lora-modules") == [
            f"{SUPPORT}@r1={ADAPTERS_DIR}/{SUPPORT}%40r1",
            f"{SUPPORT}@r2={ADAPTERS_DIR}/{SUPPORT}%40r2",
            f"{SQL}={ADAPTERS_DIR}/{SQL}",
        ]
        # Three modules all resident (chat is latency-sensitive); rank 32 is the sql adapter's, a vLLM choice.
        assert flag_values(args, "--max-loras") == ["3"]
        assert flag_values(args, "--max-lora-rank") == ["32"]
        assert flag_values(args, "--max-cpu-loras") == ["3"]
    # The models that take neither the base's tiers nor its batch tier load none.
    assert (
        "--enable-lora"
        not in prod.k8s("Deployment", "llama-1b-v1", "team-a")["spec"]["template"]["spec"]["containers"][0]["args"]
    )


@pytest.mark.upstream_source
def test_the_lora_flags_are_flags_of_the_pinned_vllm():
    known = pinned_vllm_flags()
    for flag in ("--enable-lora", "--lora-modules", "--max-loras", "--max-lora-rank", "--max-cpu-loras"):
        assert flag in known, flag


def test_module_items_are_read_by_vllm_as_name_equals_path(prod):
    # vLLM 0.33.0 LoRAParserAction: an item with '=' and no ',' is `name=path`, split on '='.
    for item in flag_values(server_args(prod, "llama-8b-v1"), "--lora-modules"):
        assert "," not in item and item.count("=") == 1
        name, path = item.split("=")
        assert path.startswith(ADAPTERS_DIR + "/")


def test_each_revision_is_fetched_at_its_pinned_location_before_vllm_starts(prod):
    spec = prod.k8s("Service", "llama-8b-v1", "serving")["spec"]["template"]["spec"]
    syncs = {c["command"][-1]: c["command"][-2] for c in spec["initContainers"] if c["name"].startswith("fetch-adapter")}
    assert syncs == {
        f"{ADAPTERS_DIR}/{SUPPORT}%40r1": "s3://inference-prod-adapters/llama-3.1-8b/support/2026-10-02/",
        f"{ADAPTERS_DIR}/{SUPPORT}%40r2": "s3://inference-prod-adapters/llama-3.1-8b/support/2026-11-20/",
        f"{ADAPTERS_DIR}/{SQL}": "s3://inference-prod-adapters/llama-3.1-8b/sql/2026-09-14/",
    }
    # The S3 adapters are read with the model's workload role, which may read their prefixes, and the weight mirror's
    # copies of its base's repository, and nothing else.
    assert spec["serviceAccountName"] == "llama-8b-weights"
    policy = json.loads(prod.one("aws:iam/rolePolicy:RolePolicy", "llama-8b-weights-identity-policy")["inputs"]["policy"])
    objects = sorted(s["Resource"] for s in policy["Statement"] if s["Action"] == ["s3:GetObject"])
    assert objects == [
        "arn:aws:s3:::inference-prod-adapters/llama-3.1-8b/sql/*",
        "arn:aws:s3:::inference-prod-adapters/llama-3.1-8b/support/*",
        "arn:aws:s3:::inference-prod-model-weights/serving/meta-llama/Llama-3.1-8B-Instruct/*",
    ]


def test_hugging_face_adapters_are_fetched_from_the_mirrors_copy_or_at_their_commit(prod_raw):
    from components.specs.pod import pod_spec
    from platform_config.weight_mirror import mirror_job_name

    revision = "a" * 40
    prod_raw["models"][BASE]["adapters"][1]["source"] = {"huggingface": "org/sql-lora", "revision": revision}
    # With prod's weight mirror: the pods copy the mirror's copy of the commit, in serving's part of the mirror, with
    # the aws CLI as they copy an S3 adapter, after the Job that made it; nothing of theirs reaches Hugging Face.
    plan = validate(copy.deepcopy(prod_raw))
    server = next(s for m in plan.models for s in m.servers if s.name == "llama-8b-v1")
    spec = pod_spec(server)
    inits = [c for c in spec["initContainers"] if c["name"].startswith("fetch-adapter")]
    syncs = {c["command"][-1]: c["command"][:3] + [c["command"][-2]] for c in inits}
    copied = f"s3://inference-prod-model-weights/serving/org/sql-lora/{revision}/"
    assert syncs[f"{ADAPTERS_DIR}/{SQL}"] == ["aws", "s3", "sync", copied] and "fetch-adapters" not in {c["name"] for c in inits}
    job = mirror_job_name("serving", "org/sql-lora", revision)
    assert job in server.mirror_jobs and job in {r.job_name for r in plan.mirrored_revisions}
    (vllm,) = spec["containers"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in vllm["env"]
    # Its workload role reads that copy (under serving's part of the mirror), and the mirror's Job writes it.
    assert copied in {uri + "/" + revision + "/" for m in plan.models for uri in m.s3_uris}
    # Without a mirror (outside production only), vLLM would fetch a repository id at no revision: the init container
    # fetches it at the commit, into the path vLLM is given.
    plan = validate(downloading_weights(prod_raw))
    server = next(s for m in plan.models for s in m.servers if s.name == "llama-8b-v1")
    (fetch,) = [c for c in pod_spec(server)["initContainers"] if c["name"] == "fetch-adapters"]
    assert fetch["command"][3:] == ["org/sql-lora", revision, f"{ADAPTERS_DIR}/{SQL}"]
    assert "snapshot_download(repo_id=repo, revision=revision, local_dir=directory)" in fetch["command"][2]
    assert fetch["image"] == server.image


def test_a_hugging_face_adapter_is_fetched_with_the_tenants_token_only(prod_raw):
    from components.plan import resolve
    from components.specs.pod import pod_spec
    from platform_config.loader import parse_platform_config as parse

    # Base weights from S3, one adapter from Hugging Face: the adapter's fetch still needs the tenant's token, where
    # the pod downloads it itself (without a weight mirror: outside production).
    # (The batch model, which loads the adapters too, serves the same weights.)
    for version in prod_raw["models"][BASE]["versions"] + prod_raw["models"][BATCH]["versions"]:
        version["source"] = {"s3Uri": "s3://inference-prod-weights/llama-3.1-8b", "revision": "2026-07-23"}
    owning(prod_raw, "serving", "s3://inference-prod-weights/llama-3.1-8b")
    prod_raw["models"][BASE]["adapters"][1]["source"] = {"huggingface": "org/sql-lora", "revision": "a" * 40}
    mirrored = parse(copy.deepcopy(prod_raw))
    config = parse(downloading_weights(prod_raw))
    for tenants, expected in ((("serving",), True), (("team-a",), False)):
        server = next(
            s for m in resolve(config, hugging_face_tenants=tenants).models for s in m.servers if s.name == "llama-8b-v1"
        )
        (fetch,) = [c for c in pod_spec(server)["initContainers"] if c["name"] == "fetch-adapters"]
        assert any(e["name"] == "HF_TOKEN" for e in fetch["env"]) is expected, tenants
    # With the mirror, the pod downloads nothing from Hugging Face: no token in it.
    server = next(
        s for m in resolve(mirrored, hugging_face_tenants=("serving",)).models for s in m.servers if s.name == "llama-8b-v1"
    )
    assert not server.hugging_face_token and "HF_TOKEN" not in json.dumps(pod_spec(server))


def test_limits_follow_the_adapters_unless_configured(prod_raw):
    config = parse_platform_config(prod_raw)
    limits = lora_limits(config, config.models[BASE])
    assert limits is not None and (limits.max_loras, limits.max_lora_rank, limits.max_cpu_loras) == (3, 32, 3)
    prod_raw["models"][BASE]["adapters"][1]["rank"] = 40  # not a vLLM choice: the next one up
    prod_raw["models"][BASE]["lora"].update(maxCpuLoras=8)
    config = parse_platform_config(prod_raw)
    limits = lora_limits(config, config.models[BASE])
    assert limits is not None and (limits.max_lora_rank, limits.max_cpu_loras) == (64, 8)
    assert limits.max_lora_rank in VLLM_MAX_LORA_RANKS


def test_an_mlflow_adapter_revision_resolves_like_a_model_version(prod_raw, tmp_path):
    from components.plan import plan_checks, resolve
    from components.specs.pod import pod_spec
    from platform_config.registry import recording

    uri = "https://mlflow.example.com"
    weights = "s3://inference-prod-adapters/llama-3.1-8b/support/2026-11-27"
    adapters(prod_raw)[0]["versions"][1]["source"] = {"mlflow": {"model": "support-lora", "alias": "challenger"}}
    entry = {"registeredModel": "support-lora", "alias": "challenger", "registryVersion": "7", "weights": weights}
    config, resolution = resolved_from_lock(prod_raw, uri, [entry], tmp_path, [plan_checks])
    assert resolution is not None
    server = next(s for m in resolve(config, hugging_face_tenants=()).models for s in m.servers if s.name == "llama-8b-v1")
    syncs = {c["command"][-1]: c["command"][-2] for c in pod_spec(server)["initContainers"]}
    assert syncs[f"{ADAPTERS_DIR}/{SUPPORT}%40r2"] == weights + "/"
    # Exported beside the model's versions under its module's name, and so recorded for an offline preview.
    output = resolution.stack_output(config)
    assert output["models"]["llama-8b"][f"{SUPPORT}@r2"] == {"source": "registry", **entry}
    assert output["models"]["llama-8b"][f"{SUPPORT}@r1"] == {"source": "stack file"}
    assert recording(output, "2026-12-01T00:00:00Z")["entries"] == [entry]


def test_an_mlflow_adapter_the_registry_cannot_resolve_names_its_key(prod_raw, tmp_path):
    from platform_config.errors import ConfigError

    uri = "https://mlflow.example.com"
    adapters(prod_raw)[1].update(source={"mlflow": {"model": "sql-lora", "version": 3}})
    with pytest.raises(ConfigError) as caught:
        resolved_from_lock(prod_raw, uri, [], tmp_path)
    (issue,) = caught.value.issues
    assert str(issue).startswith("inference-platform:models[1].adapters[1].source.mlflow.version: the recorded registry")


def test_an_mlflow_adapter_needs_the_registry(prod_raw):
    adapters(prod_raw)[1].update(source={"mlflow": {"model": "sql-lora", "version": 3}})
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].adapters[1].source.mlflow: names a version in the MLflow")


def test_the_endpoint_picker_of_an_adapter_base_scores_adapter_affinity(prod_raw):
    from components.specs.endpoint_picker.picker_config import endpoint_picker_config

    def picker_config(raw: dict[str, Any]) -> dict[str, Any]:
        server = next(s for m in validate(raw).models for s in m.servers if s.name == "llama-70b-v1")
        assert server.endpoint_picker is not None
        return endpoint_picker_config(server.endpoint_picker)

    without = picker_config(prod_raw)
    assert "lora-affinity-scorer" not in [p["type"] for p in without["plugins"]]
    prod_raw["models"][0]["adapters"] = [
        {"name": "llama-3.1-70b-legal", "rank": 8, "source": {"huggingface": "org/legal-lora", "revision": "b" * 40}}
    ]
    config = picker_config(prod_raw)
    assert "lora-affinity-scorer" in [p["type"] for p in config["plugins"]]
    (profile,) = config["schedulingProfiles"]
    assert {"pluginRef": "lora-affinity-scorer", "weight": 1} in profile["plugins"]
    # The other scorers keep their weights.
    assert [p for p in profile["plugins"] if p["pluginRef"] != "lora-affinity-scorer"] == without["schedulingProfiles"][0][
        "plugins"
    ]


# --- memory -----------------------------------------------------------------------------------


def test_the_memory_estimate_of_prod(prod_raw):
    config = parse_platform_config(prod_raw)
    model = config.models[BASE]
    # Llama-3.1-8B: 32 layers x (9 x 4096 + 2 x 1024 + 3 x 14336) = 32 x 81920 elements per unit of rank.
    assert model.lora.base_shape is not None and lora_elements_per_rank(model.lora.base_shape) == 2_621_440
    memory = lora_memory(config, model)
    assert memory is not None
    assert memory.gpu_bytes == 3 * 32 * 2_621_440 * 2  # 3 slots at rank 32, bfloat16
    assert memory.cpu_bytes == (16 + 16 + 32) * 2_621_440 * 2  # the three modules at their own ranks


def test_the_report_shows_the_adapters_memory(previews):
    section = previews["prod"].report["adapters"]
    entry = section["data"]["llama-8b"]
    assert entry["gpuMemoryPerReplica"] == "0.5Gi" and entry["cpuMemoryPerReplica"] == "0.4Gi"
    assert [m["module"] for m in entry["modules"]] == [f"{SUPPORT}@r1", f"{SUPPORT}@r2", SQL]
    assert entry["modules"][2]["weights"] == "s3://inference-prod-adapters/llama-3.1-8b/sql/2026-09-14"


# --- routing: the real filter in LuaJIT, the routes in RE2 --------------------------------------


def header_matches(condition: dict[str, str], value: str | None) -> bool:
    if value is None:
        return False
    if "exact" in condition:
        return value == condition["exact"]
    return re2.fullmatch(condition["regex"], value) is not None


def first_route(virtual_service: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """The route Envoy takes: the first whose any match has every header condition met."""
    for route in virtual_service["spec"]["http"]:
        for match in route["match"]:
            if all(header_matches(c, headers.get(h)) for h, c in match["headers"].items()):
                return route
    raise AssertionError(f"no route matches {headers}")


def adapter_request(lua, model: str, user: str = "user-1", tier: str | None = None, **headers: str) -> Request:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    return Request(lua, {":method": "POST", **headers}, body, claims=token(tier=tier, sub=user))


def served_model(request: Request) -> str:
    # The servers keep the last of duplicate members: the one the filter appended.
    return request.json()["model"]


def test_an_adapter_is_served_by_the_base_models_servers_under_its_module(lua, prod):
    service = prod.k8s("VirtualService", "llama-8b", "serving")
    request = adapter_request(lua, SQL, tier="premium")
    assert request.status is None and served_model(request) == SQL and request.json()["priority"] == 0
    route = first_route(service, request.headers)
    assert route["name"].startswith("premium-") and route["route"][0]["destination"]["subset"] in (
        "llama-8b-v1-premium",
        "llama-8b-v2-premium",
    )


def test_an_adapter_shares_the_base_models_tenants_and_callers(lua):
    for tenant, status in (("serving", None), ("team-a", None), ("team-b", None), ("team-c", "403")):
        body = json.dumps({"model": SQL, "messages": []})
        request = Request(lua, {":method": "POST"}, body, claims=token(tenant=tenant))
        assert request.status == status, tenant


def test_an_adapters_batch_tier_goes_to_the_batch_models_servers_under_its_module(lua, prod):
    service = prod.k8s("VirtualService", "llama-8b", "serving")
    modules = set()
    for i in range(200):
        request = adapter_request(lua, SUPPORT, user=f"user-{i}", tier="batch")
        assert request.status is None
        route = first_route(service, request.headers)
        # The base model's own batch route: its batch model's stable version, batch subset, whatever the user key.
        assert route["name"] == "batch-to-llama-8b-batch"
        assert route["route"][0]["destination"]["subset"] == "llama-8b-batch-v1-batch"
        modules.add(served_model(request))
        # llama-8b-batch takes the batch tier only: vLLM's default priority (it schedules first come, first served).
        assert request.json()["priority"] == 0
    # The adapter canary still splits the batch tier: both revisions, the modules the batch servers load.
    assert modules == {f"{SUPPORT}@r1", f"{SUPPORT}@r2"}
    sql = adapter_request(lua, SQL, tier="batch")
    assert served_model(sql) == SQL and first_route(service, sql.headers)["name"] == "batch-to-llama-8b-batch"


def test_the_batch_models_servers_load_the_adapters_of_the_models_whose_batch_tier_they_take(prod):
    base = server_args(prod, "llama-8b-v1")
    batch = server_args(prod, "llama-8b-batch-v1")
    # The same module names the gateway filter writes, at the same paths, with limits sized from the same modules.
    for flag in ("--lora-modules", "--max-loras", "--max-lora-rank", "--max-cpu-loras"):
        assert flag_values(batch, flag) == flag_values(base, flag), flag
    spec = prod.k8s("Service", "llama-8b-batch-v1", "serving")["spec"]["template"]["spec"]
    syncs = {c["command"][-1]: c["command"][-2] for c in spec["initContainers"] if c["name"].startswith("fetch-adapter")}
    assert syncs[f"{ADAPTERS_DIR}/{SQL}"] == "s3://inference-prod-adapters/llama-3.1-8b/sql/2026-09-14/"
    # Its own workload role reads the adapters' prefixes beside its weights (the mirror's copy of the same base).
    assert spec["serviceAccountName"] == "llama-8b-batch-weights"
    policy = prod.one("aws:iam/rolePolicy:RolePolicy", "llama-8b-batch-weights-identity-policy")["inputs"]["policy"]
    objects = sorted(s["Resource"] for s in json.loads(policy)["Statement"] if s["Action"] == ["s3:GetObject"])
    assert objects == [
        "arn:aws:s3:::inference-prod-adapters/llama-3.1-8b/sql/*",
        "arn:aws:s3:::inference-prod-adapters/llama-3.1-8b/support/*",
        "arn:aws:s3:::inference-prod-model-weights/serving/meta-llama/Llama-3.1-8B-Instruct/*",
    ]
    # The pods declare the adapters' base by its OpenAI name, which these servers answer to as well.
    annotations = prod.k8s("Service", "llama-8b-batch-v1", "serving")["spec"]["template"]["metadata"]["annotations"]
    declared = json.loads(annotations["inference.platform/lora-adapters"])
    assert declared[SQL] == {"tenant": "serving", "base": "llama-3.1-8b-instruct", "modules": [SQL]}
    assert "llama-3.1-8b-instruct" in flag_values(batch, "--served-model-name")


def test_an_adapters_batch_tier_takes_the_batch_models_priority_where_it_schedules_by_priority(prod_raw):
    batch = next(m for m in prod_raw["models"] if m["name"] == "llama-8b-batch")
    batch["tiers"] = ["standard", "batch"]
    evaluated = Evaluated(prod_raw)
    lua = lua_runtime(evaluated)
    service = evaluated.k8s("VirtualService", "llama-8b", "serving")
    request = adapter_request(lua, SQL, tier="batch")
    assert served_model(request) == SQL
    # The batch tier's vLLM priority (2 by default), which the batch model's servers now schedule by.
    assert request.json()["priority"] == parse_platform_config(prod_raw).traffic.tiers["batch"].vllm_priority == 2
    assert "--scheduling-policy" in server_args(evaluated, "llama-8b-batch-v1")
    assert first_route(service, request.headers)["name"] == "batch-to-llama-8b-batch"
    # The base model's own servers keep their tiers: a standard request for the adapter stays on them.
    standard = first_route(service, adapter_request(lua, SQL, tier="standard").headers)
    assert standard["route"][0]["destination"]["subset"].startswith(("llama-8b-v1-", "llama-8b-v2-"))


def test_an_adapter_is_refused_a_tier_neither_its_base_nor_the_batch_model_serves(prod_raw):
    prod_raw["models"][BASE].pop("batchModel")
    prod_raw["models"][BASE]["tiers"] = ["premium", "standard"]
    evaluated = Evaluated(prod_raw)
    lua = lua_runtime(evaluated)
    route = first_route(
        evaluated.k8s("VirtualService", "llama-8b", "serving"), adapter_request(lua, SUPPORT, tier="batch").headers
    )
    assert route["name"] == "tier-not-served" and route["directResponse"]["status"] == 403
    assert "(and its adapters) serves tiers premium, standard" in route["directResponse"]["body"]["string"]


def test_the_adapter_canary_is_sticky_weighted_and_apart_from_the_base_canary(lua, prod):
    service = prod.k8s("VirtualService", "llama-8b", "serving")
    on = {"adapter": 0, "base": 0, "both": 0}
    for i in range(N_USERS):
        user = f"user-{i}"
        request = adapter_request(lua, SUPPORT, user=user)
        module = served_model(request)
        again = served_model(adapter_request(lua, SUPPORT, user=user)) if i < 200 else module
        assert module == again  # sticky
        route = first_route(service, request.headers)
        base_canary = route["route"][0]["destination"]["subset"].startswith("llama-8b-v2")
        adapter_canary = module == f"{SUPPORT}@r2"
        on["adapter"] += adapter_canary
        on["base"] += base_canary
        on["both"] += adapter_canary and base_canary
    assert abs(100 * on["adapter"] / N_USERS - 10) <= 1.5
    assert abs(100 * on["base"] / N_USERS - 10) <= 1.5
    # The adapter canary takes the top buckets, the base canary the bottom ones: no user is on both.
    assert on["both"] == 0


def test_the_override_header_names_an_adapter_revision(lua, prod):
    service = prod.k8s("VirtualService", "llama-8b", "serving")
    for revision in ("r1", "r2"):
        users = [f"user-{i}" for i in range(50)]
        modules = {served_model(adapter_request(lua, SUPPORT, user=u, **{"x-model-version": revision})) for u in users}
        assert modules == {f"{SUPPORT}@{revision}"}
    # A revision is no base version: the base routes split the request as usual.
    forced = adapter_request(lua, SUPPORT, **{"x-model-version": "r2"})
    assert "-override-" not in first_route(service, forced.headers)["name"]
    # A base version in the header forces the base version and leaves the adapter's split alone.
    base = adapter_request(lua, SUPPORT, user="user-7", **{"x-model-version": "v2"})
    assert first_route(service, base.headers)["name"] == "standard-override-v2"
    assert served_model(base) == served_model(adapter_request(lua, SUPPORT, user="user-7"))


def test_only_the_named_principals_may_send_the_override_header(prod):
    policy = prod.k8s("AuthorizationPolicy", "inference-gateway-version-override", "istio-system")
    rules = policy["spec"]["rules"]
    assert {"key": "request.headers[x-model-version]", "values": ["*"]} in [w for r in rules for w in r["when"]]


def test_requests_without_a_user_split_by_the_adapter_canary_weight(lua):
    body = json.dumps({"model": SUPPORT, "messages": []})
    canary = sum(
        served_model(Request(lua, {":method": "POST"}, body, claims=token(sub=None))) == f"{SUPPORT}@r2" for _ in range(5000)
    )
    assert abs(100 * canary / 5000 - 10) <= 2


def test_a_client_cannot_reach_a_revision_module_by_its_name(lua, prod):
    service = prod.k8s("VirtualService", "llama-8b", "serving")
    request = adapter_request(lua, f"{SUPPORT}@r2")
    with pytest.raises(AssertionError, match="no route"):
        first_route(service, request.headers)
