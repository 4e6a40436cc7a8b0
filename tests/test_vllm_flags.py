"""The flags `vllm serve` and `vllm run-batch` take in vLLM's pinned source release (platform_config/pins.py
VLLM_SOURCE, read through tests/helpers.py vllm_release), as preview/vllm_release.py parses them: the parse
held to the facts' list where both exist, the flags the servers are built with, every flag the batch
jobs pass, and the parsed list kept beside the release for its hash only."""

from __future__ import annotations

import ast
import copy
import tomllib
from typing import Any

import pytest

from components.specs.batch_job import RUNNER_SOURCE, engine_command
from platform_config.models import ServerArgs
from platform_config.pins import VLLM_FLAGS_CALIBRATION_SOURCE
from preview.upstream import Facts, facts_dir
from preview.vllm_release import frontend_args_module, function, release_path, run_batch_module, serve_flags
from preview.vllm_release import run_batch_flags as release_run_batch_flags

from .batch_helpers import review_labels, with_adapter_job
from .helpers import downloading_weights, raw_stack, validate, vllm_release

# --- `vllm run-batch` and `vllm serve`: their parsers, read by preview/vllm_release.py ----------------------------


def assert_run_batch_uses_make_arg_parser() -> None:
    """`vllm run-batch` at 0.33.0: the `vllm` script is vllm.entrypoints.cli.main:main
    (pyproject.toml), whose CMD_MODULES include vllm.entrypoints.cli.run_batch, whose subcommand
    `run-batch` builds its parser with entrypoints/launchers/run_batch.py `make_arg_parser`, which registers
    `BatchFrontendArgs.add_cli_args` (one `--<field>` per field of BatchFrontendArgs and its base
    BaseFrontendArgs, entrypoints/common/cli_args.py `add_cli_args`, plus the extra flags
    `_customize_cli_kwargs` gives: `-i`, `-o`), then `AsyncEngineArgs.add_cli_args` (its own `add_argument`s and
    EngineArgs.add_cli_args', engine/arg_utils.py, each flag spelt out): what run_batch_flags reads."""
    release = vllm_release()
    scripts = tomllib.loads(release.text("pyproject.toml"))["project"]["scripts"]
    assert scripts["vllm"] == "vllm.entrypoints.cli.main:main", scripts
    main = ast.unparse(release.tree("vllm/entrypoints/cli/main.py"))
    assert "vllm.entrypoints.cli.run_batch" in main[main.index("CMD_MODULES") :]
    command = release.tree("vllm/entrypoints/cli/run_batch.py")
    names = [
        s.value.value
        for s in ast.walk(command)
        if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "name" and isinstance(s.value, ast.Constant)
    ]
    assert names == ["run-batch"], names
    init = ast.unparse(function(command, "RunBatchSubcommand.subparser_init"))
    assert run_batch_module(release) == "vllm/entrypoints/launchers/run_batch.py"
    assert "from vllm.entrypoints.launchers.run_batch import make_arg_parser" in init
    assert "make_arg_parser(run_batch_parser)" in init
    registered = [
        ast.unparse(call.func)
        for call in ast.walk(function(release.tree(run_batch_module(release)), "make_arg_parser"))
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
    ]
    assert registered == ["BatchFrontendArgs.add_cli_args", "AsyncEngineArgs.add_cli_args"], registered
    add_cli_args = ast.unparse(function(release.tree(frontend_args_module(release)), "BaseFrontendArgs.add_cli_args"))
    assert "*extra_flags, f\"--{key.replace('_', '-')}\"" in add_cli_args, "BaseFrontendArgs names its flags otherwise"
    engine = ast.unparse(function(release.tree("vllm/engine/arg_utils.py"), "AsyncEngineArgs.add_cli_args"))
    assert "EngineArgs.add_cli_args" in engine


# Flags of vLLM 0.18.0's facts list (../shared/upstream-facts/vllm/0.18.0-flags.txt) that `vllm serve`'s parsers
# do not define, each checked in the 0.18.0 release: EngineArgs fields without a flag of their own
# (vllm/engine/arg_utils.py `_api_process_count`, `_api_process_rank`, `model_weights`,
# `enable_mm_processor_stats`), the top-level parser's (vllm/entrypoints/cli/main.py `--version`; argparse's
# `--help`), `vllm chat`/`vllm complete`'s (vllm/entrypoints/cli/openai.py `--url`, `--model-name`,
# `--system-prompt`, `--quick`, `--max-tokens`) and the one `--no-` form it lists.
NOT_SERVE_FLAGS_IN_THE_0_18_0_FACTS = {
    "---api-process-count",
    "---api-process-rank",
    "--model-weights",
    "--enable-mm-processor-stats",
    "--version",
    "--help",
    "--url",
    "--model-name",
    "--system-prompt",
    "--quick",
    "--max-tokens",
    "--no-enable-prefix-caching",
}


@pytest.mark.upstream_source
def test_the_serve_flag_parse_reads_what_the_facts_list_at_0_18_0():
    """The parse the upstream stage falls back to (preview/vllm_release.py serve_flags), held to the facts' list
    where both exist: in vLLM 0.18.0's release it finds no flag the list lacks, and misses only flags that are not
    `vllm serve`'s (NOT_SERVE_FLAGS_IN_THE_0_18_0_FACTS). So at 0.33.0, with no list in the facts, the stage
    checks against the same kind of set."""
    listed = Facts(facts_dir()).vllm_flags("0.18.0")
    assert listed, "no vLLM 0.18.0 flag list in the upstream facts"
    parsed = serve_flags(vllm_release(VLLM_FLAGS_CALIBRATION_SOURCE))
    long_flags = {flag for flag in parsed if flag.startswith("--")}
    assert sorted(long_flags - listed) == []
    assert listed - long_flags == NOT_SERVE_FLAGS_IN_THE_0_18_0_FACTS
    # Short aliases are the parsers' too (`-tp`), which the list does not hold.
    assert {"-tp", "-pp"} <= parsed - listed


@pytest.mark.upstream_source
def test_the_pinned_release_defines_the_flags_the_platform_relies_on():
    """At 0.33.0 `vllm serve` still takes the flags the servers are built with, and no longer takes
    `--max-num-partial-prefills` (gone since 0.27.0), which the stack config therefore no longer offers."""
    flags = serve_flags(vllm_release())
    assert {"--shutdown-timeout", "--scheduling-policy", "--served-model-name", "--max-num-seqs"} <= flags
    assert {"--load-format", "--model-loader-extra-config", "--enable-lora", "--max-lora-rank"} <= flags
    assert "--max-num-partial-prefills" not in flags and "max_num_partial_prefills" not in ServerArgs.model_fields


def run_batch_flags() -> frozenset[str]:
    """Every flag `vllm run-batch` defines at the pinned release (assert_run_batch_uses_make_arg_parser). Not
    listed: the `--no-` forms argparse adds to boolean flags (the jobs pass none)."""
    return release_run_batch_flags(vllm_release())


def every_setting_job() -> dict[str, Any]:
    """prod, with `review-labels` given every engine setting a stack may set (ServerArgs)."""
    raw = copy.deepcopy(raw_stack("prod"))
    job = next(j for j in raw["batchJobs"] if j["name"] == "review-labels")
    job["model"]["server"] = {
        "maxModelLen": 8192,
        "gpuMemoryUtilization": 0.85,
        "maxNumSeqs": 64,
        "quantization": "fp8",
        "dtype": "bfloat16",
        "enforceEager": True,
        "maxNumBatchedTokens": 8192,
        "longPrefillTokenThreshold": 1024,
        "kvCacheDtype": "fp8",
        "blockSize": 16,
        "cpuOffloadGb": 1.5,
        "seed": 0,
        "tokenizerMode": "auto",
        "maxLogprobs": 20,
    }
    # A setting added to ServerArgs must be added here too; the admission rate bounds a serving queue only.
    serving_only = {"prefill_tokens_per_second"}
    assert ServerArgs.model_validate(job["model"]["server"]).model_fields_set == set(ServerArgs.model_fields) - serving_only
    return raw


def runner_chunk_flags() -> set[str]:
    """The flags the shard runner adds to the engine command per chunk (batch_runner.py `Popen`)."""
    tree = ast.parse(RUNNER_SOURCE.read_text())
    return {
        node.value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "subprocess.Popen"
        for node in ast.walk(call.args[0])
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("-")
    }


@pytest.mark.upstream_source
def test_every_flag_the_batch_jobs_pass_is_one_run_batch_defines():
    """`vllm run-batch` + components/specs/batch_job.py engine_command (for prod's jobs, a job with
    an adapter, and a job with every engine setting) + the runner's `-i`/`-o`, against the parser
    of vllm/entrypoints/launchers/run_batch.py at 0.33.0 (run_batch_flags)."""
    assert_run_batch_uses_make_arg_parser()
    defined = run_batch_flags()
    # Prod's jobs read the weight mirror's copy of their model; without a mirror (outside production) they pass the
    # Hugging Face repository and its `--revision`.
    downloading = validate(downloading_weights(raw_stack("prod"))).batch_jobs
    plans = [
        *validate(raw_stack("prod")).batch_jobs,
        *downloading,
        review_labels(with_adapter_job()),
        review_labels(every_setting_job()),
    ]
    ours = {arg for plan in plans for arg in engine_command(plan)[2:] if arg.startswith("-")}
    ours |= runner_chunk_flags()
    assert {"-i", "-o", "--model", "--revision", "--lora-modules", "--enforce-eager", "--max-logprobs"} <= ours
    assert sorted(ours - defined) == []
    # The parse is not vacuous: flags run-batch does not take are not found.
    assert not {"--port-offset", "--enable-magic"} & defined and {"--host", "--output-tmp-dir"} <= defined


@pytest.mark.upstream_source
def test_the_parsed_flags_are_kept_beside_the_release_for_its_hash_only(tmp_path):
    """preview/vllm_release.py pinned_serve_flags: parsed once, then read from the kept list; a list kept for
    another hash is parsed again (and replaced)."""
    import shutil

    from preview.vllm_release import pinned_serve_flags

    release = vllm_release()
    shutil.copy(release_path(release.pin), tmp_path / release.pin.filename)
    kept = tmp_path / f"{release.pin.filename}.serve-flags.txt"
    parsed = pinned_serve_flags(release.pin, tmp_path)
    assert parsed == serve_flags(release) and kept.read_text().splitlines()[0] == release.pin.sha256
    kept.write_text(f"{release.pin.sha256}\n--only-this\n")
    assert pinned_serve_flags(release.pin, tmp_path) == {"--only-this"}
    kept.write_text("0" * 64 + "\n--only-this\n")
    assert pinned_serve_flags(release.pin, tmp_path) == parsed
    assert kept.read_text().splitlines()[0] == release.pin.sha256
    assert pinned_serve_flags(release.pin, tmp_path / "nothing-here") is None
