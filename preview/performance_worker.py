"""What NVIDIA's aiconfigurator predicts for each model server: run in its own virtualenv (`.venv-perf`, from
`preview/performance-requirements.txt`), by the preview's Serving performance stage (`preview/performance.py`).

It reads one JSON request on stdin and writes one JSON answer on stdout; it imports nothing of the project, so the
program's virtualenv never holds the package's numpy/pandas/scipy stack, nor this one the program's pins. The
package's data is read where the package installed it (its model configs and measured perf tables), never copied.

Request: {"backendVersion": "0.24.0", "servers": [server, ...]}, each server
  {"id", "performanceModel": str | null, "config": {config.json keys} | null, "system": str | null, "tp": int,
   "capacityBytes": int, "memoryFraction": float, "maxNumBatchedTokens": int, "maxModelLen": int,
   "predict": {"isl", "osl", "concurrency": [int, ...]} | null}
Answer: {"package": {...versions}, "servers": {id: {"config": {...}, "kv": {...} | {"error": str},
  "predictions": [{"concurrency", "ttftMs", "tpotMs", "outputTokensPerSecond", "requestsPerSecond"}, ...] | null,
  "noPrediction": str | null}}, "primed": [system, ...]}

The KV-cache figure is aiconfigurator-core's `estimate_kv_cache` (its native vLLM memory model: weights, activations
at vLLM's batched-token budget, NCCL and runtime overhead against `gpu_memory_utilization` of the device's total);
latencies are the package's aggregated (continuous batching) estimate, `aiconfigurator.cli.api.cli_estimate(mode="agg")`,
made as that function makes it, on aiconfigurator-core's SDK (`_agg_estimator`): the CLI's modules (its reports
import matplotlib's pyplot, its generator jinja2) are never loaded. The latency plot is another process's
(`preview/performance_plot.py`), drawn only for a change against a baseline.

`--warm <backendVersion> <system>...` (run when `.venv-perf` is installed) keeps what the package derives from each
system's attention tables alone, whatever the request (`warm`), for the next workers to read rather than derive again.
`--serve <socket> <idle seconds> <lifetime seconds>`: after its answer on stdout the worker stays up on that Unix
socket and answers further requests with what it has loaded, the same bytes (`preview/performance_serve.py`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from .performance_serve import record_state, serve, serve_arguments

# The HF config keys the stage reads back (the context length bound, the KV shape), when the package has them.
CONFIG_KEYS = (
    "architectures",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "vocab_size",
    "torch_dtype",
)


def package_config(performance_model: str) -> dict[str, Any] | None:
    """The HF config.json aiconfigurator-core ships for a model (`model_configs/<org>--<name>_config.json`)."""
    name = performance_model.replace("/", "--") + "_config.json"
    entry = resources.files("aiconfigurator_core") / "model_configs" / name
    if not entry.is_file():
        return None
    loaded: dict[str, Any] = json.loads(entry.read_text())
    return loaded


def has_measurements(system: str, backend_version: str) -> bool:
    """Whether the database holds measured vLLM tables for a system at a version (the GEMM table stands for all)."""
    folder = resources.files("aiconfigurator_core") / "systems" / "data" / system / "gemm" / "vllm" / backend_version
    return folder.is_dir()


@functools.cache
def _scratch() -> Path:
    """A folder of this process's own for the declared configs, removed when it exits."""
    folder = tempfile.mkdtemp(prefix="performance-worker-")
    atexit.register(shutil.rmtree, folder, True)
    return Path(folder)


def _model_path(server: dict[str, Any]) -> str:
    """The model as the package takes it: its own config's name, else a folder holding the declared config.json, named
    by the config's digest: the package keeps what it read from a folder by the folder's path
    (aiconfigurator_core/sdk/utils.py `_load_model_config_from_model_path`, functools.cache), so in a worker that
    stays up a path must only ever hold the one config."""
    if server.get("performanceModel"):
        return str(server["performanceModel"])
    text = json.dumps(server["config"])
    folder = _scratch() / hashlib.sha256(text.encode()).hexdigest()[:32]
    if not (folder / "config.json").is_file():
        folder.mkdir(exist_ok=True)
        partial = folder / f"config.json.{os.getpid()}"
        partial.write_text(text)
        os.replace(partial, folder / "config.json")
    return str(folder)


# The system whose memory model stands in for one without measured vLLM tables: the memory model reads a system's
# NCCL and runtime reserves (`misc` of systems/<name>.yaml), which `memory_system` requires to be the same.
MEMORY_STAND_IN = "h100_sxm"


def _misc(system: str) -> Any:
    import yaml

    spec = yaml.safe_load((resources.files("aiconfigurator_core") / "systems" / f"{system}.yaml").read_text())
    return spec.get("misc")


def memory_system(system: str | None, backend_version: str) -> str | None:
    """The system the native memory model runs on for a server: its own where the database loads for it, else the
    stand-in when the two state the same reserves (the device's capacity is the server's in either case); None:
    only the naive estimate applies."""
    if system is not None and has_measurements(system, backend_version):
        return system
    if system is not None and (resources.files("aiconfigurator_core") / "systems" / f"{system}.yaml").is_file():
        if _misc(system) == _misc(MEMORY_STAND_IN):
            return MEMORY_STAND_IN
    return None


def _kv_estimate(server: dict[str, Any], model_path: str, backend_version: str) -> dict[str, Any]:
    from aiconfigurator_core.sdk import estimate_kv_cache

    system = memory_system(server["system"], backend_version)
    # The naive estimate keeps 80 % of what the weights leave for the KV cache; given vLLM's share as the capacity.
    capacity = server["capacityBytes"] if system is not None else int(server["capacityBytes"] * server["memoryFraction"])
    try:
        estimate = estimate_kv_cache(
            model_path,
            system or MEMORY_STAND_IN,
            "vllm",
            backend_version,
            max_num_tokens=server["maxNumBatchedTokens"],
            max_batch_size=1,
            memory_fraction_kind="of_total",
            memory_fraction_value=server["memoryFraction"],
            tp_size=server["tp"],
            gpu_memory_capacity_bytes_override=capacity,
            allow_naive_fallback=system is None,
        )
    except Exception as error:  # noqa: BLE001 - the package's refusal is the answer (e.g. weights beyond the device)
        # Named by the server, never by the scratch folder a declared config was written to.
        return {"error": str(error).splitlines()[0].replace(model_path, server["id"])[:400]}
    estimate.pop("tolerance_adjusted", None)
    estimate["memorySystem"] = system
    return estimate


# One estimate: time to first token and per output token (ms), output tokens per second.
Estimate = Callable[[int, int, int], tuple[float, float, float]]


# Bounded: a worker that stays up is asked about other servers by each preview.
@functools.lru_cache(maxsize=64)
def _agg_estimator(model_path: str, system: str, backend_version: str, tp: int, memory_fraction: float) -> Estimate:
    """What `cli_estimate(model_path, system, mode="agg", backend_name="vllm", backend_version=..., tp_size=tp,
    free_gpu_memory_fraction=memory_fraction, isl=, osl=, batch_size=)` computes (aiconfigurator/cli/api.py
    `_run_agg_estimate`, its defaults: no pipeline or data parallelism, quantization from the checkpoint, no MTP),
    with the model, the database view and the backend built once for these arguments and asked at each (isl, osl,
    concurrency); servers of the same shape (a canary and its stable version) share one, and the backend's cache of
    each request shape with it (that cache is not keyed by the model: one backend serves one model only). The
    data-driven context-FMHA check (`resolve_context_fmha_by_data`) changes the config only where the checkpoint
    implies fp8 FMHA, and reading it materializes the whole context-attention table in Python: it runs only there.
    tests/test_serving_performance.py holds the figures to `cli_estimate`'s."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.common import FMHAQuantMode
    from aiconfigurator_core.sdk.config import ModelConfig, RuntimeConfig
    from aiconfigurator_core.sdk.config_builders import apply_nextn, build_model_config
    from aiconfigurator_core.sdk.models import (
        check_is_moe,
        get_model,
        resolve_context_fmha_by_data,
        resolve_dsv4_moe_arch,
        resolve_nvfp4_for_system,
    )
    from aiconfigurator_core.sdk.models.helpers import _get_model_info, _infer_quant_modes_from_raw_config
    from aiconfigurator_core.sdk.rust_engine_step import validate_engine_step_backend

    engine_step_backend = validate_engine_step_backend(None)
    database = _database(system, backend_version)
    moe_tp = moe_ep = None
    if check_is_moe(model_path):
        moe_tp, moe_ep = ModelConfig(tp_size=tp, attention_dp_size=1).resolve_moe_parallelism()
    model_config = build_model_config(tp, 1, 1, moe_tp, moe_ep)
    apply_nextn(model_config, 0)
    info = _get_model_info(model_path)
    inferred = _infer_quant_modes_from_raw_config(info.get("raw_config", {}), info.get("architecture"))
    if inferred.get("fmha_quant_mode") == FMHAQuantMode.fp8:
        resolve_context_fmha_by_data(model_config, model_path, database, "vllm", is_context_role=True)
    resolve_dsv4_moe_arch(model_config, model_path, system_name=system, backend_name="vllm")
    resolve_nvfp4_for_system(model_config, system, model_path, backend_name="vllm")
    model = get_model(model_path, model_config, "vllm")
    backend = get_backend("vllm")

    def estimate(isl: int, osl: int, concurrency: int) -> tuple[float, float, float]:
        runtime = RuntimeConfig(
            isl=isl,
            osl=osl,
            batch_size=concurrency,
            image_height=0,
            image_width=0,
            num_images_per_request=1,
            prefix=0,
            engine_step_backend=engine_step_backend,
        )
        summary = backend.run_agg(
            model,
            database,
            runtime,
            ctx_tokens=isl,
            max_seq_len=None,
            free_gpu_memory_fraction=memory_fraction,
            decode_tokens_per_iteration=1.0,
        )
        if summary.check_oom():
            raise RuntimeError(
                f"OOM: the model '{model_path}' does not fit in GPU memory on system '{system}' "
                f"with the given parallelism (tp={tp}, pp=1, dp=1)."
            )
        result = summary.get_result_dict()
        if result is None:
            raise RuntimeError("Estimation produced no results. The configuration may be invalid.")
        return float(result["ttft"]), float(result["tpot"]), float(result.get("tokens/s", 0.0))

    return estimate


def _predictions(server: dict[str, Any], model_path: str, backend_version: str) -> list[dict[str, float]]:
    predict = server["predict"]
    estimate = _agg_estimator(model_path, server["system"], backend_version, server["tp"], server["memoryFraction"])
    out = []
    for concurrency in predict["concurrency"]:
        ttft, tpot, tokens_per_second = estimate(predict["isl"], predict["osl"], concurrency)
        # Requests a replica completes per second: its concurrency over one request's time (Little's law).
        request_ms = ttft + tpot * max(predict["osl"] - 1, 0)
        out.append(
            {
                "concurrency": concurrency,
                "ttftMs": ttft,
                "tpotMs": tpot,
                "outputTokensPerSecond": tokens_per_second,
                "requestsPerSecond": concurrency * 1000 / request_ms if request_ms > 0 else 0.0,
            }
        )
    return out


def _database(system: str, backend_version: str) -> Any:
    """The package's SILICON view of a system's measured vLLM tables, as `cli_estimate` queries them (one object per
    system and version in a process: the view is cached, and so is what is memoized on it)."""
    from aiconfigurator_core.sdk.perf_database import get_database_view

    return get_database_view(
        system, "vllm", backend_version, allow_missing_data=False, database_mode="SILICON", transfer_policy=None
    )


# What the package derives from a system's tables alone, whatever the request, kept when the virtualenv is installed
# (`make perf-venv`: `warm`) so that a worker reads it instead of deriving it again. Today that is the attention
# tables' lane densities: the order in which an attention op walks the tables' kernel lanes ranks them by measured
# coverage (aiconfigurator_core/sdk/operations/attention.py resolved_lane_order_for_op), and counting it loads the
# whole context and generation attention tables into a model-less engine twice, once with the sibling versions'
# rows and once without (sdk/engine_table_view.py fetch_attention_lane_density): about 0.4 CPU-seconds of the
# 1.0 a system's first estimate takes (h100_sxm, aiconfigurator-core 0.12.0). A worker without the file, or with one
# another package wrote, derives them itself: the same figures, later.
WARM_FILE_ENV = "PERFORMANCE_WARM_FILE"
WARM_FORMAT = 1
LANE_TABLES = ("_context_attention_data", "_generation_attention_data")
# Where fetch_attention_lane_density memoizes a view's densities: (the probe cache's generation, {(table, with the
# sibling versions' rows): {lane: (slices, rows)}}) (aiconfigurator_core/sdk/engine_table_view.py, 0.12.0).
DENSITY_MEMO = "_attention_lane_density_cache"


def warm_file() -> Path:
    """Beside the interpreter's packages: `<virtualenv>/performance-warm.json`, or PERFORMANCE_WARM_FILE."""
    return Path(os.environ.get(WARM_FILE_ENV) or Path(sys.prefix) / "performance-warm.json")


def _package_identity() -> dict[str, Any]:
    """aiconfigurator-core as installed: its version and the digest of its RECORD, which lists every file it installed
    (its tables, its engine, its code) with that file's own sha256."""
    distribution = metadata.distribution("aiconfigurator-core")
    record = distribution.read_text("RECORD") or ""
    return {"format": WARM_FORMAT, "version": distribution.version, "record": hashlib.sha256(record.encode()).hexdigest()}


def _memo(densities: list[Any]) -> dict[tuple[str, bool], dict[str, tuple[int, int]]]:
    """The memo's content for a system's kept densities ([[table, siblings, {lane: [slices, rows]}], ...])."""
    return {
        (str(table), bool(siblings)): {str(lane): (int(slices), int(rows)) for lane, (slices, rows) in lanes.items()}
        for table, siblings, lanes in densities
    }


def warm(backend_version: str, systems: list[str]) -> list[str]:
    """Derive and keep the lane densities of each system with measured data (of those named), written whole or not at
    all; the systems kept. A system whose densities the package does not memoize as DENSITY_MEMO says is not kept (a
    package that changed them would otherwise be primed wrongly): it only costs its workers the time."""
    from aiconfigurator_core.sdk.engine_table_view import fetch_attention_lane_density

    kept: dict[str, Any] = {}
    for system in sorted(set(systems)):
        if not has_measurements(system, backend_version):
            continue
        database = _database(system, backend_version)
        densities = [
            [table, siblings, fetch_attention_lane_density(database, table, shared_layer=siblings)]
            for table in LANE_TABLES
            for siblings in (True, False)
        ]
        memo = database.__dict__.get(DENSITY_MEMO)
        if isinstance(memo, tuple) and len(memo) == 2 and memo[1] == _memo(densities):
            kept[system] = {"systemsRoot": database.systems_root, "densities": densities}
    path = warm_file()
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    content = {"package": _package_identity(), "backendVersion": backend_version, "systems": kept}
    partial.write_text(json.dumps(content, sort_keys=True))
    os.replace(partial, path)
    return sorted(kept)


def _prime(systems: list[str], backend_version: str) -> list[str]:
    """Give each system's view the lane densities the install kept, as the package memoizes them, where the file is
    this package's (the same version and files) and the view reads the tables the densities were counted in; the
    systems whose view holds them (primed now, or by an earlier request of a worker that stays up: the same answer
    either way). Anything else (no file, another package's, a damaged one) primes nothing."""
    if not systems:
        return []
    try:
        content = json.loads(warm_file().read_text())
        if content["package"] != _package_identity() or content["backendVersion"] != backend_version:
            return []
        kept = {system: content["systems"][system] for system in systems if system in content["systems"]}
        memos = {system: (entry["systemsRoot"], _memo(entry["densities"])) for system, entry in kept.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []
    from aiconfigurator_core.sdk import engine

    primed = []
    for system, (root, memo) in sorted(memos.items()):
        database = _database(system, backend_version)
        if database is None or database.systems_root != root:
            continue
        if DENSITY_MEMO not in database.__dict__:
            database.__dict__[DENSITY_MEMO] = (engine._PROBE_CACHE_GENERATION, memo)
        held = database.__dict__[DENSITY_MEMO]
        if isinstance(held, tuple) and len(held) == 2 and held[1] == memo:
            primed.append(system)
    return primed


def answer(request: dict[str, Any]) -> dict[str, Any]:
    backend_version = request["backendVersion"]
    answers: dict[str, dict[str, Any]] = {}
    predicted = {s["system"] for s in request["servers"] if s.get("predict") and s.get("performanceModel")}
    primed = _prime(sorted(s for s in predicted if has_measurements(s, backend_version)), backend_version)
    for server in request["servers"]:
        config = package_config(server["performanceModel"]) if server.get("performanceModel") else server.get("config")
        entry: dict[str, Any] = {"config": {k: config[k] for k in CONFIG_KEYS if k in config} if config else None}
        if config is None:
            entry.update(kv={"error": f"aiconfigurator-core has no config for {server.get('performanceModel')!r}"})
            answers[server["id"]] = entry
            continue
        model_path = _model_path(server)
        entry["kv"] = _kv_estimate(server, model_path, backend_version)
        entry["predictions"] = None
        if server.get("predict") is None:
            entry["noPrediction"] = server.get("noPrediction") or "not asked"
        elif not server.get("performanceModel"):
            entry["noPrediction"] = "the database measures only the models it ships a config for"
        elif not has_measurements(server["system"], backend_version):
            entry["noPrediction"] = f"the database has no measured vLLM {backend_version} data for {server['system']}"
        elif "error" in entry["kv"]:
            entry["noPrediction"] = "it does not fit"
        else:
            entry["predictions"] = _predictions(server, model_path, backend_version)
            entry["noPrediction"] = None
        answers[server["id"]] = entry
    versions = {name: metadata.version(name) for name in ("aiconfigurator", "aiconfigurator-core")}
    return {"package": versions, "servers": answers, "primed": primed}


def _libyaml_safe_load() -> None:
    """The package reads its system and model files with `yaml.safe_load`, PyYAML's pure-Python parser (over a
    hundred files for a request); libyaml's CSafeLoader builds the same objects with the same safe constructors
    (yaml/cyaml.py: CParser with SafeConstructor) in a fraction of the time, where PyYAML was built with it."""
    import yaml

    if getattr(yaml, "__with_libyaml__", False):

        def safe_load(stream: Any) -> Any:
            return yaml.load(stream, Loader=yaml.CSafeLoader)

        yaml.safe_load = safe_load


def main(argv: list[str]) -> int:
    started = time.monotonic()
    # The package logs its table loading and fallbacks; the answer is the only output.
    logging.disable(logging.WARNING)
    _libyaml_safe_load()
    if argv[:1] == ["--warm"] and len(argv) >= 2:
        with contextlib.redirect_stdout(io.StringIO()):
            kept = warm(argv[1], argv[2:])
        print(f"{warm_file()}: the attention lane densities of {', '.join(kept) or 'no system'}")
        return 0
    serving = serve_arguments(argv) if argv[:1] == ["--serve"] else None
    if argv and serving is None:
        usage = "usage: performance_worker [--warm <backendVersion> <system>... | --serve <socket> <idle> <lifetime>]"
        print(usage, file=sys.stderr)
        return 2
    with contextlib.redirect_stdout(io.StringIO()):
        request = json.loads(sys.stdin.read())
        record = record_state("aiconfigurator-core")
        result = answer(request)
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    if serving is None:
        return 0
    # Stays up for the next previews, its package's files as they were when it started.
    path, idle, lifetime = serving
    return serve(path, idle, started + lifetime, answer, lambda: record_state("aiconfigurator-core") == record)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
