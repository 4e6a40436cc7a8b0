"""The Serving performance stage's worker (preview/performance_worker.py, run in .venv-perf) and how the preview asks
it (preview/performance_prediction.py): the estimate as aiconfigurator's CLI makes it, the servers heard as the
program exports them and asked for once, an interpreter that is missing, does not start or is no virtualenv, the
pinned package, the install's warm-up, and the answers kept per request and shared between checkouts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from platform_config.pins import AICONFIGURATOR

from .helpers import ROOT, load_json, raw_stack, write_stack
from .performance_helpers import PERF_PYTHON, needs_database, package


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
