"""The Serving performance stage (preview/performance.py): each server's memory fit and KV cache, its predicted
latency and throughput from NVIDIA's aiconfigurator (run in .venv-perf), replicas at peak against maxReplicas, cost per
million output tokens, in the report and the pull request's comment; and the config check that refuses weights that
cannot load at all (platform_config/checks/weights.py check_weights_fit_gpu_memory)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.plan_reports import SERVING_SHAPE_ANNOTATION
from platform_config.pins import AICONFIGURATOR

from .helpers import ROOT, Evaluated, config_problems, load_json, raw_stack, run_preview, write_stack

PERF_PYTHON = ROOT / ".venv-perf" / "bin" / "python"


def needs_database(test):
    """A test that runs aiconfigurator: skipped without .venv-perf, which `.ci/run` turns into a failure."""
    skip = pytest.mark.skipif(not PERF_PYTHON.exists(), reason="no .venv-perf: `make perf-venv` installs aiconfigurator")
    return pytest.mark.performance_database(skip(test))


def package(code: str) -> object:
    """What the installed package answers to `code` (which prints one JSON value), called directly."""
    script = "import json, logging, contextlib, io\nlogging.disable(logging.WARNING)\n" + code
    result = subprocess.run([str(PERF_PYTHON), "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def performance(report: dict) -> dict[str, dict]:
    return {s["server"]: s for s in report["performance"]["data"]["servers"]}


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


@needs_database
def test_the_workers_estimate_is_the_clis_to_the_bit():
    """The worker makes the aggregated estimate on the package's SDK, as `cli_estimate(mode="agg")` makes it, without
    loading the CLI: the same figures, exactly, for a model over 4 GPUs and one whose fp8 checkpoint runs the
    context-FMHA data check; one estimator asked at several concurrencies, in any order."""
    cases = [
        ("meta-llama/Meta-Llama-3.1-70B", 4, 1024, 256, [8, 1, 2]),
        ("Qwen/Qwen3-32B-FP8", 2, 4096, 512, [1, 16]),
    ]
    compared = package(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from aiconfigurator.cli.api import cli_estimate\n"
        "from preview.performance_worker import _agg_estimator\n"
        "out = []\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    for model, tp, isl, osl, concurrencies in {cases!r}:\n"
        "        estimate = _agg_estimator(model, 'h100_sxm', '0.24.0', tp, 0.9)\n"
        "        for c in concurrencies:\n"
        "            r = cli_estimate(model, 'h100_sxm', mode='agg', backend_name='vllm', backend_version='0.24.0',\n"
        "                isl=isl, osl=osl, batch_size=c, tp_size=tp, free_gpu_memory_fraction=0.9)\n"
        "            out.append([[float(r.ttft), float(r.tpot), float(r.tokens_per_second)], list(estimate(isl, osl, c))])\n"
        "print(json.dumps(out))"
    )
    assert isinstance(compared, list) and len(compared) == 5
    assert all(cli == worker and cli[0] > 0 for cli, worker in compared), compared


def test_the_servers_are_heard_as_the_program_exports_them_and_asked_for_once():
    """The stage sends its request when the program exports `servingShapes` (preview/engine.py's export listener, told
    of every output as `pulumi.export` stores it, while the registrations still drain), then again from the resolved
    outputs: the same request is asked once, and another one is refused rather than judged by the first's answer."""
    from preview.engine import evaluate
    from preview.performance_prediction import Prediction

    from .helpers import stack_config_from_raw

    heard: list[tuple[str, object]] = []
    evaluation = evaluate(ROOT, stack_config_from_raw(raw_stack("dev")), exported=lambda n, v: heard.append((n, v)))
    assert [name for name, _ in heard] == list(evaluation.stack_outputs)
    shapes = dict(heard)["servingShapes"]
    assert isinstance(shapes, dict) and shapes == evaluation.stack_outputs["servingShapes"] and shapes["servers"]
    prediction = Prediction(None, problem="not run: no interpreter")
    prediction.send(shapes["servers"])
    prediction.send(evaluation.stack_outputs["servingShapes"]["servers"])
    assert prediction.problem == "not run: no interpreter"
    changed = [{**shapes["servers"][0], "maxModelLen": 1}]
    prediction.send(changed)
    assert prediction.problem == "not run: the program's servingShapes changed after it exported them"
    assert prediction.answer() is None


def test_without_the_database_the_stage_says_so_rather_than_passing(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PERFORMANCE_PYTHON": str(tmp_path / "missing" / "python")}
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "preview", "--quiet", "--stack", "dev", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    section = load_json(out / "report.json")["performance"]
    assert section["summary"].startswith("not run: python of .venv-perf is missing")
    assert "warn Serving performance: not run" in result.stdout


def test_an_interpreter_that_does_not_start_is_a_warning_not_a_crash(tmp_path):
    """PERFORMANCE_PYTHON naming a file that cannot be run: the stage says so, and the preview goes on."""
    python = tmp_path / "python"
    python.write_text("not a program\n")  # no execute permission
    out = tmp_path / "out"
    env = {**os.environ, "PERFORMANCE_PYTHON": str(python)}
    command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "preview", "--quiet", "--stack", "dev", "--out", str(out)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    summary = load_json(out / "report.json")["performance"]["summary"]
    assert summary.startswith("not run: ") and "does not start: Permission denied" in summary, summary
    assert "Traceback" not in result.stderr


def test_an_interpreter_outside_a_virtualenv_is_keyed_by_its_path(tmp_path):
    from preview.performance_prediction import _installed

    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    assert _installed(python) == [str(Path(sys.executable).resolve())]
    assert any(".dist-info" in held for held in _installed(ROOT / ".venv-perf" / "bin" / "python"))


def test_the_performance_virtualenv_pins_the_package_the_pins_name():
    lines = (ROOT / "preview" / "performance-requirements.txt").read_text().splitlines()
    assert f"{AICONFIGURATOR.name}=={AICONFIGURATOR.version}" in lines
    assert f"aiconfigurator-core=={AICONFIGURATOR.version}" in lines
    pinned = [line for line in lines if line and not line.startswith("#")]
    assert all("==" in line for line in pinned), pinned


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
def test_the_installs_warm_up_primes_the_worker_and_changes_no_figure(tmp_path):
    """`make perf-venv` keeps beside the worker's packages what aiconfigurator derives from the tables of the GPU
    catalog's systems alone (`python -m preview.performance_prediction --warm`: their attention lane densities); a
    worker reads them instead of deriving them again, to the very same answer, and a file another package wrote (its
    RECORD differs) primes nothing."""
    warm = tmp_path / "warm.json"
    env = {**os.environ, "PERFORMANCE_WARM_FILE": str(warm)}
    command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "preview.performance_prediction", "--warm"]
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=300)
    # The catalog's systems with measured vLLM 0.24.0 data: not l4 or a100_sxm, which have none.
    assert sorted(load_json(warm)["systems"]) == ["h100_sxm", "l40s"]
    server = {
        "id": "m/v1",
        "performanceModel": "meta-llama/Meta-Llama-3.1-8B",
        "config": None,
        "system": "h100_sxm",
        "tp": 1,
        "capacityBytes": 80 * 2**30,
        "memoryFraction": 0.9,
        "maxNumBatchedTokens": 8192,
        "maxModelLen": 4096,
        "predict": {"isl": 1024, "osl": 256, "concurrency": [1, 12]},
        "noPrediction": None,
    }

    def worker() -> dict:
        result = subprocess.run(
            [str(PERF_PYTHON), "-m", "preview.performance_worker"],
            cwd=ROOT,
            env=env,
            input=json.dumps({"backendVersion": "0.24.0", "servers": [server]}),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return json.loads(result.stdout)

    primed = worker()
    assert primed["primed"] == ["h100_sxm"] and len(primed["servers"]["m/v1"]["predictions"]) == 2
    other = load_json(warm)
    other["package"]["record"] = "0" * 64
    warm.write_text(json.dumps(other))
    unprimed = worker()
    assert unprimed["primed"] == [] and unprimed["servers"] == primed["servers"]


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


@needs_database
def test_an_unchanged_request_is_read_back_and_a_changed_one_asked_again(tmp_path):
    """The answer is kept per request (the servers, the worker and the pinned packages): the second preview of the
    same stack reads it back with the same figures; a change to a server asks aiconfigurator again."""
    env = {**os.environ, "PERFORMANCE_CACHE_DIR": str(tmp_path / "cache")}

    def preview(*args: str) -> dict:
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "preview", "--quiet", "--stack", "dev", "--out", str(out)]
        result = subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr
        return load_json(out / "report.json")["performance"]["data"]

    first, second = preview(), preview()
    assert (first["cached"], second["cached"]) == (False, True)
    assert first["servers"] == second["servers"]
    raw = raw_stack("dev")
    raw["models"][0]["server"]["maxModelLen"] = 2048
    changed = preview("--config-file", str(write_stack(tmp_path, raw)))
    assert changed["cached"] is False and changed["servers"] != first["servers"]


def test_two_checkouts_with_the_same_packages_share_their_answers_and_another_package_does_not(tmp_path):
    """The answer's key holds what the virtualenv has installed, not where it is: the pull request's preview in CI
    reads back what its default branch's preview, in another checkout, asked for the same servers."""
    from preview.performance_prediction import _cache_key

    def venv(where: str, *dists: str):
        python = tmp_path / where / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.touch()
        for dist in dists:
            (tmp_path / where / "lib" / "python3.11" / "site-packages" / f"{dist}.dist-info").mkdir(parents=True)
        return python

    asked = {"backendVersion": "0.24.0", "servers": [{"id": "m/v1"}]}
    default_branch = venv("trusted/.venv-perf", "aiconfigurator-0.12.0", "pandas-2.3.3")
    pull_request = venv(".venv-perf", "aiconfigurator-0.12.0", "pandas-2.3.3")
    upgraded = venv("other/.venv-perf", "aiconfigurator-0.13.0", "pandas-2.3.3")
    assert _cache_key(asked, default_branch) == _cache_key(asked, pull_request)
    assert _cache_key(asked, upgraded) != _cache_key(asked, pull_request)
