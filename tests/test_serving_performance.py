"""The Serving performance stage (preview/performance.py): each server's memory fit and KV cache, its predicted
latency and throughput from NVIDIA's aiconfigurator (run in .venv-perf), replicas at peak against maxReplicas, cost per
million output tokens, in the report and the pull request's comment; and the config check that refuses weights that
cannot load at all (platform_config/checks/weights.py check_weights_fit_gpu_memory). The worker that asks
aiconfigurator, its interpreter and its answers kept: tests/test_serving_performance_worker.py."""

from __future__ import annotations

import json
import math

import pytest

from components.plan_reports import SERVING_SHAPE_ANNOTATION

from .helpers import ROOT, Evaluated, config_problems, load_json, raw_stack, run_preview, write_stack
from .performance_helpers import PERF_PYTHON, needs_database, package, performance

# --- the config check: weights that cannot load ------------------------------------------------


def test_a_140gib_checkpoint_on_an_l4_is_refused_with_the_numbers():
    raw = raw_stack("prod")
    batch = next(m for m in raw["models"] if m["name"] == "llama-8b-batch")
    batch["resources"]["weightsSize"] = "140Gi"
    index = raw["models"].index(batch)
    problems = config_problems(raw)
    assert any(
        p.startswith(f"inference-platform:models[{index}].resources.weightsSize: ")
        and "the weights (140Gi) need 140Gi per GPU (1 per replica) on pool 'l4-batch'" in p
        and "vLLM takes 0.9 of the 24Gi of L4-24GB: 21.6Gi, so they cannot load" in p
        for p in problems
    ), problems


def test_the_weights_are_split_over_a_replicas_gpus():
    """The 70B's 132Gi over 4 H100s is 33Gi a GPU, within 72Gi: no problem; on one GPU it is refused."""
    raw = raw_stack("prod")
    big = next(m for m in raw["models"] if m["name"] == "llama-70b")
    big["resources"]["gpus"] = 1
    problems = [p for p in config_problems(raw) if "weightsSize" in p]
    assert problems and "need 132Gi per GPU (1 per replica)" in problems[0] and "72Gi" in problems[0], problems


# --- the stage on the committed prod stack -----------------------------------------------------


def _llama_params(config: dict) -> int:
    """Llama's parameters from its config.json: embeddings, each layer's attention and MLP and norms, the final
    norm and the output head (untied)."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    kv_width = config["num_key_value_heads"] * (config.get("head_dim") or h // config["num_attention_heads"])
    per_layer = h * h + 2 * h * kv_width + h * h + 3 * h * inter + 2 * h
    head = 0 if config.get("tie_word_embeddings") else config["vocab_size"] * h
    return config["vocab_size"] * h + layers * per_layer + h + head


@needs_database
def test_prods_70b_on_four_h100s_fits_with_the_kv_cache_its_config_gives(previews):
    """The KV cache per token and per GPU, and the weights, computed here from the model's config.json as the
    package ships it (read in place), are the stage's; its tokens are what vLLM's share leaves of the device."""
    config = package(
        "from importlib import resources\n"
        "entry = resources.files('aiconfigurator_core') / 'model_configs' / 'meta-llama--Meta-Llama-3.1-70B_config.json'\n"
        "print(entry.read_text().replace(chr(10), ' '))"
    )
    assert isinstance(config, dict)
    tp = 4
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    # K and V, bf16, every layer, this GPU's share of the KV heads.
    per_token = 2 * config["num_hidden_layers"] * math.ceil(config["num_key_value_heads"] / tp) * head_dim * 2
    server = performance(previews["prod"].report)["llama-70b/v1"]
    kv = server["kv"]
    assert kv["kv_size_per_token_bytes"] == per_token == 81920
    # bf16 over 4 GPUs; the package leaves out the norms' vectors (1.3 million of the 70.6 billion parameters).
    assert kv["memory_breakdown"]["weights_bytes"] == pytest.approx(_llama_params(config) * 2 / tp, rel=1e-4)
    breakdown = kv["memory_breakdown"]
    left = 80 * 2**30 * 0.9 - sum(breakdown.values())
    assert kv["total_kv_size_tokens"] == int(left // per_token)
    # 16384-token sequences it holds, at least the 8 it runs at once.
    assert server["sequences"] == kv["total_kv_size_tokens"] // 16384 >= 8
    assert config["max_position_embeddings"] == server["contextLength"] >= 16384


@needs_database
def test_the_report_and_the_pull_request_comment_carry_the_table(previews):
    run = previews["prod"]
    markdown = (run.out / "report.md").read_text()
    top = markdown.split("<details>")[0]
    assert "| server | device | fits | KV cache (sequences of maxModelLen) | TTFT | ITL |" in top
    assert "| llama-70b/v1 | 4 x H100-80GB | yes |" in top
    # A MIG slice is an estimate scaled from the whole GPU, marked as such; no prediction says why.
    assert "| llama-8b/v1 | a 3g.40gb slice of H100-80GB | yes |" in top and "~" in top
    assert "no prediction: the database has no measured vLLM 0.24.0 data for l4" in markdown
    # The plot shows what a change moves: without a baseline none is drawn, and the report says why.
    assert not (run.out / "performance.png").exists() and run.report["performance"]["data"]["plotted"] == []
    assert "No latency plot: it draws the servers whose predicted latency a change moves (`--baseline`)." in markdown


@needs_database
def test_the_70b_meets_prods_chat_peak_within_its_max_replicas_and_says_what_a_token_costs(previews):
    server = performance(previews["prod"].report)["llama-70b/v1"]
    at = server["atConcurrency"]
    assert at["concurrency"] == 8 and at["ttftMs"] <= 500
    # 8 requests/s at peak over what one replica serves within the target.
    assert server["replicasNeeded"] == math.ceil(8 / at["requestsPerSecond"]) <= 8
    # Half a p5.48xlarge (4 of its 8 GPUs) at the pool's price over the replica's output tokens.
    price = next(p for p in raw_stack("prod")["nodePools"] if p["name"] == "h100")["pricePerHour"]
    expected = price / 2 / at["outputTokensPerSecond"] / 3600 * 1_000_000
    assert abs(float(server["costPerMillionOutputTokens"]) - expected) < 0.01


# --- what a hostile or careless change gets ----------------------------------------------------


@pytest.fixture(scope="module")
def careless(tmp_path_factory, previews):
    """One prod variant with four mistakes the stage must name: a chat peak no maxReplicas meets, a maxModelLen
    beyond the 1B's context, the batch 8B running more sequences than its KV cache holds, and the 8B on a whole
    H100 (predicted from the database, not scaled)."""
    if not PERF_PYTHON.exists():
        pytest.skip("no .venv-perf: `make perf-venv` installs aiconfigurator")
    tmp = tmp_path_factory.mktemp("careless")
    raw = raw_stack("prod")
    raw["profiles"]["chat"]["peak"]["requestsPerSecond"] = 100
    models = {m["name"]: m for m in raw["models"]}
    models["llama-1b"]["server"]["maxModelLen"] = 262144
    models["llama-8b-batch"]["autoscaling"]["kpa"] = {"targetConcurrency": 10, "containerConcurrency": 16}
    # Room on the pool's whole GPUs for the 8B: fewer 70B and 8B replicas (the peak still needs more).
    models["llama-70b"]["autoscaling"]["maxReplicas"] = 4
    eight = models["llama-8b"]
    eight["resources"].pop("migProfile")
    eight["resources"]["gpus"] = 1
    eight["autoscaling"]["maxReplicas"] = 3
    out = tmp / "out"
    stack = write_stack(tmp, raw)
    result = run_preview(
        "--stack", "prod", "--config-file", str(stack), "--out", str(out), "--baseline", str(previews["prod"].out)
    )
    return raw, result, load_json(out / "report.json"), (out / "report.md").read_text(), out


@needs_database
def test_a_careless_change_fails_the_stage_naming_each_key(careless):
    raw, result, report, *_ = careless
    assert result.returncode == 1, result.stderr
    findings = "\n".join(report["performance"]["data"]["findings"])
    index = {m["name"]: i for i, m in enumerate(raw["models"])}
    assert f"models[{index['llama-70b']}].autoscaling.maxReplicas: v1: the peak of 100 requests/s needs" in findings
    assert f"models[{index['llama-1b']}].server.maxModelLen: 262144 tokens, but the model's context length" in findings
    assert f"models[{index['llama-8b-batch']}].server.maxModelLen: v1: the KV cache holds" in findings
    assert "fewer than the 16 it runs at once (maxNumSeqs)" in findings
    # Production: the peak it cannot meet fails the stage, not only warns.
    assert report["performance"]["failed"]


def _pack_verdicts(records, policy_config: dict) -> dict[str, list[str]]:
    """What the pack, running as its own process and configured as `pulumi up --policy-pack-config` configures it,
    says of each vLLM workload under serving-performance: by resource name, the messages."""
    from preview.policy_runner import PolicyPack
    from preview.stack_config import load_project, load_stack_config

    config = load_stack_config(load_project(ROOT), "prod")
    pack = PolicyPack(ROOT / "policies", config.values, "inference-platform", "prod").connect()
    try:
        pack.handshake(ROOT)
        pack.configure_stack("inference-platform", "prod", config.values, config.secret_keys)
        pack.configure(pack.info(), policy_config)
        said: dict[str, list[str]] = {}
        for record in records:
            if SERVING_SHAPE_ANNOTATION in ((record.inputs.get("metadata") or {}).get("annotations") or {}):
                hits = [d for d in pack.analyze(record, None) if d.policy == "serving-performance"]
                assert all(d.level == "mandatory" for d in hits)
                said[record.name] = [d.message for d in hits]
        return said
    finally:
        pack.close()


@needs_database
def test_pulumi_up_holds_each_server_to_the_stages_verdict_through_the_pack(careless, previews):
    """The careless change's pack-config.json, passed to the pack as the deploy passes it, stops its three failing
    servers at `pulumi up`, naming the stage's findings; prod's own verdicts (a preview of other servers) judged none
    of its shapes; and without verdicts a production stack is refused."""
    raw, _, report, _, out = careless
    records = Evaluated(raw).records
    verdicts = load_json(out / "pack-config.json")
    judged = verdicts["serving-performance"]["servingVerdicts"]
    shapes = {
        r.name: r.inputs["metadata"]["annotations"][SERVING_SHAPE_ANNOTATION]
        for r in records
        if SERVING_SHAPE_ANNOTATION in ((r.inputs.get("metadata") or {}).get("annotations") or {})
    }
    # Every running version's vLLM workload carries the shape the stage judged, and only those.
    assert sorted(judged[shape]["server"] for shape in shapes.values()) == sorted(performance(report))
    said = _pack_verdicts(records, verdicts)
    # The pack says what the stage found, each failing finding once, on the server it is of (production: all fail).
    findings = report["performance"]["data"]["findings"]
    messages = [m for ms in said.values() for m in ms]
    assert len(messages) == len(findings) and all(any(f in m for m in messages) for f in findings)
    index = {m["name"]: i for i, m in enumerate(raw["models"])}
    (peak,) = said["llama-70b-v1-deployment"]
    assert f"llama-70b/v1: models[{index['llama-70b']}].autoscaling.maxReplicas: v1: the peak of 100" in peak
    assert any("262144 tokens, but the model's context length" in m for m in said["llama-1b-v1-deployment"])
    assert any("fewer than the 16 it runs at once" in m for m in said["llama-8b-batch-v1-knative-service"])
    # Which stacks are production is the pack's setting, not the stack's: told prod is not, the peak it misses is
    # advisory (not said), what cannot fit still fails.
    elsewhere = _pack_verdicts(records, {"serving-performance": {**verdicts["serving-performance"], "productionStacks": []}})
    assert elsewhere["llama-70b-v1-deployment"] == []
    assert any("262144 tokens, but the model's context length" in m for m in elsewhere["llama-1b-v1-deployment"])
    stale = _pack_verdicts(records, load_json(previews["prod"].out / "pack-config.json"))
    assert "is not one the given verdicts judged" in stale["llama-70b-v1-deployment"][0]
    none = _pack_verdicts(records, {})
    assert all(len(m) == 1 and "no verdict of the preview's Serving performance stage" in m[0] for m in none.values())


@needs_database
def test_the_8b_on_a_whole_h100_is_predicted_as_the_package_predicts_it(careless):
    """Called directly with the same model, GPU, parallelism, lengths and concurrency, the package gives the figures
    the stage reports (the database's own answer: the same deterministic tables, within rounding)."""
    _, _, report, *_ = careless
    server = performance(report)["llama-8b/v1"]
    assert not server["estimated"]
    at = server["atConcurrency"]
    direct = package(
        "from aiconfigurator.cli.api import cli_estimate\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    r = cli_estimate('meta-llama/Meta-Llama-3.1-8B', 'h100_sxm', mode='agg', backend_name='vllm',\n"
        "        backend_version='0.24.0', isl=1024, osl=256, batch_size=12, tp_size=1, free_gpu_memory_fraction=0.9)\n"
        "print(json.dumps({'ttft': float(r.ttft), 'tpot': float(r.tpot), 'tps': float(r.tokens_per_second)}))"
    )
    assert isinstance(direct, dict)
    assert at["ttftMs"] == pytest.approx(direct["ttft"], rel=1e-6)
    assert at["tpotMs"] == pytest.approx(direct["tpot"], rel=1e-6)
    assert at["outputTokensPerSecond"] == pytest.approx(direct["tps"], rel=1e-6)


def test_a_declared_architecture_must_be_whole():
    raw = raw_stack("dev")
    raw["models"][0]["architecture"].pop("numKeyValueHeads")
    problems = config_problems(raw)
    assert any("architecture" in p and "numKeyValueHeads missing" in p for p in problems), problems


@needs_database
def test_against_the_baseline_each_changed_figure_shows_old_and_new(careless, previews):
    """The pull request's comment: the committed prod stack's figures → the change's, at the top."""
    _, _, report, markdown, _ = careless
    top = markdown.split("<details>")[0]
    before = {s["server"]: s for s in previews["prod"].report["performance"]["data"]["servers"]}
    after = performance(report)
    row = next(line for line in top.splitlines() if line.startswith("| llama-70b/v1 |"))
    was, now = before["llama-70b/v1"]["replicasNeeded"], after["llama-70b/v1"]["replicasNeeded"]
    assert f"{was} / 8 → {now} / 4" in row, row
    eight = next(line for line in top.splitlines() if line.startswith("| llama-8b/v1 |"))
    assert "a 3g.40gb slice of H100-80GB → 1 x H100-80GB" in eight, eight


@needs_database
def test_against_the_baseline_the_servers_whose_latency_the_change_moves_are_plotted(careless, previews):
    """The plot beside report.md draws the servers whose predictions the change moves (the 8B's two versions, off
    their MIG slices onto whole GPUs), each beside its baseline curve, and not the 70B, whose peak and maxReplicas
    changed but not its latency."""
    _, _, report, markdown, out = careless
    before, after = performance(previews["prod"].report), performance(report)
    moved = [s for s, r in after.items() if r["predictions"] and r["predictions"] != before[s]["predictions"]]
    plotted = report["performance"]["data"]["plotted"]
    assert sorted(plotted) == sorted(moved) == ["llama-8b/v1", "llama-8b/v2"]
    assert after["llama-70b/v1"]["replicasNeeded"] != before["llama-70b/v1"]["replicasNeeded"]
    assert (out / "performance.png").read_bytes().startswith(b"\x89PNG")
    assert "![latency against concurrency, against the baseline (dashed)](performance.png)" in markdown


@needs_database
def test_the_policy_config_sets_the_level_of_what_the_servers_are_predicted_to_miss(tmp_path, careless):
    """`serving-performance: advisory` in the policy config (CI's, from the default branch) makes the peak a warning in
    production too; what cannot fit still fails. A level that is none is refused before anything runs."""
    raw, *_ = careless
    stack = write_stack(tmp_path, raw)
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"serving-performance": "advisory"}))
    out = tmp_path / "out"
    result = run_preview("--stack", "prod", "--config-file", str(stack), "--out", str(out), "--policy-config", str(config))
    assert result.returncode == 1, result.stderr
    section = load_json(out / "report.json")["performance"]
    assert section["data"]["level"] == "advisory" and section["summary"].startswith("5 servers (advisory)")
    assert "3 findings; 3 advisory" in section["summary"], section["summary"]
    assert all("maxReplicas" not in line for line in section["data"]["findings"][:3])
    config.write_text(json.dumps({"serving-performance": {"enforcementLevel": "sometimes"}}))
    result = run_preview("--stack", "prod", "--out", str(tmp_path / "bad"), "--policy-config", str(config))
    assert result.returncode == 2
    assert "policy config 'serving-performance': give one of advisory, mandatory, disabled" in result.stderr
    assert "Traceback" not in result.stderr
