"""A batch job's shard runner, shipped to its pods in a ConfigMap and run by the vLLM image's
python3 (standard library only; `huggingface_hub`, a vLLM dependency, for dataset inputs).

    python3 batch_runner.py <engine command...>      e.g. vllm run-batch --model ... --revision ...

The shard is the job's completion index (JOB_COMPLETION_INDEX, set by the Job controller):
lines [index x BATCH_SHARD_LINES, (index + 1) x BATCH_SHARD_LINES) of the input, counting only
non-blank lines (as vLLM's batch runner reads them), over the input's `.jsonl` files in order.
The shard is processed in chunks of BATCH_CHUNK_LINES: each chunk is written to a file, the
engine command is run with `-i <chunk input> -o <chunk output>` (vLLM's run-batch flags), the
output is checked against the OpenAI batch format (one line per input line, the same custom_ids,
each line an object with `id`, `custom_id`, `response` and `error`) and only then renamed to
`<BATCH_OUTPUT_DIR>/shard-<index>/chunk-<k>.jsonl`. A chunk whose file exists is done and
skipped: a preempted, paused or retried shard resumes at its first unfinished chunk (the pod's
stage-in container brings the shard's finished chunks back from S3 first, and its uploader
container copies each finished chunk to S3 as it appears).

On exit (done, failed or stopped) the runner writes its exit code to BATCH_STATUS_FILE, which
the uploader waits for before its last upload.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# What vLLM's BatchRequestInput accepts (vllm/entrypoints/openai/run_batch.py: `method` POST, the
# body chosen by `url`): chat completions, embeddings, score and rerank.
METHODS = ("POST",)
URLS = ("/v1/chat/completions", "/v1/embeddings")
URL_SUFFIXES = ("/score", "/rerank")
# Every line of a batch output (BatchRequestOutput: id, custom_id, response, error).
OUTPUT_KEYS = ("id", "custom_id", "response", "error")


class InputError(Exception):
    """A line that is not an OpenAI batch request: the shard cannot run."""


class EngineError(Exception):
    """The engine failed or wrote an output that does not answer its chunk."""


def env_int(name: str) -> int:
    value = os.environ.get(name, "")
    if not value.isdigit():
        raise SystemExit(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def input_files() -> list[Path]:
    """The input's JSONL files in order: a Hugging Face dataset's named files at its revision
    (downloaded into HF_HOME), or every `.jsonl` under BATCH_INPUT_DIR in name order."""
    repo = os.environ.get("BATCH_INPUT_HF_REPO")
    if repo:
        from huggingface_hub import hf_hub_download  # a dependency of vLLM, present in its image

        revision = os.environ["BATCH_INPUT_HF_REVISION"]
        names = json.loads(os.environ["BATCH_INPUT_FILES"])
        return [Path(hf_hub_download(repo, name, repo_type="dataset", revision=revision)) for name in names]
    root = Path(os.environ["BATCH_INPUT_DIR"])
    return sorted(p for p in root.rglob("*.jsonl") if p.is_file())


def shard_lines(files: list[Path], start: int, stop: int) -> Iterator[tuple[str, int, str]]:
    """(file, line number, line) of the non-blank input lines with global index in [start, stop)."""
    index = 0
    for path in files:
        with path.open(encoding="utf-8") as handle:
            for number, raw in enumerate(handle, start=1):
                line = raw.strip()
                if not line:
                    continue
                if index >= stop:
                    return
                if index >= start:
                    yield str(path), number, line
                index += 1


def engine_model_names(engine: list[str]) -> set[str]:
    """The OpenAI names the engine command serves: its `--served-model-name` values and the name of
    each `--lora-modules name=path` item (the job's adapter; vLLM 0.33.0 takes them space-separated
    after the flag, vllm/entrypoints/common/cli_args.py LoRAParserAction). Empty when it names none."""
    names: set[str] = set()
    flag = None
    for arg in engine:
        if arg.startswith("-"):
            flag = arg
        elif flag == "--served-model-name":
            names.add(arg)
        elif flag == "--lora-modules":
            names.add(arg.partition("=")[0])
    return names


def checked_request(where: str, line: str, models: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{where}: not JSON ({error.msg})") from None
    if not isinstance(request, dict):
        raise InputError(f"{where}: a batch request is a JSON object")
    custom_id, method, url, body = (request.get(k) for k in ("custom_id", "method", "url", "body"))
    if not isinstance(custom_id, str) or not custom_id:
        raise InputError(f"{where}: custom_id must be a non-empty string")
    if method not in METHODS:
        raise InputError(f"{where}: method must be POST, got {method!r}")
    if not isinstance(url, str) or not (url in URLS or url.endswith(URL_SUFFIXES)):
        raise InputError(f"{where}: url {url!r} is not one vLLM's batch runner serves ({', '.join(URLS)}, .../score, .../rerank)")
    if not isinstance(body, dict):
        raise InputError(f"{where}: body must be a JSON object")
    # A line without `model` runs on the base model; one naming another model would fail in vLLM.
    if models and body.get("model") is not None and body.get("model") not in models:
        raise InputError(f"{where}: body.model {body.get('model')!r} is not served by this job ({', '.join(sorted(models))})")
    return request


def checked_output(path: Path, custom_ids: list[str]) -> None:
    """The engine's output answers every request of its chunk exactly once."""
    seen: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                result = json.loads(raw)
            except json.JSONDecodeError:
                raise EngineError(f"{path}:{number}: not JSON") from None
            if not isinstance(result, dict) or any(key not in result for key in OUTPUT_KEYS):
                raise EngineError(f"{path}:{number}: a batch output line has {', '.join(OUTPUT_KEYS)}")
            if not isinstance(result["custom_id"], str) or not isinstance(result["id"], str):
                raise EngineError(f"{path}:{number}: id and custom_id are strings")
            if result["response"] is None and result["error"] is None:
                raise EngineError(f"{path}:{number}: neither a response nor an error")
            seen.append(result["custom_id"])
    if sorted(seen) != sorted(custom_ids):
        raise EngineError(f"{path}: {len(seen)} answers for {len(custom_ids)} requests, or other custom_ids than asked")


# What the shard's finished chunks were made from (model, input, shard and chunk sizes), kept
# beside them: a chunk is only skipped when it answers the very same requests with the same model.
FINGERPRINT_FILE = "_job.json"


def check_fingerprint(path: Path, fingerprint: str) -> None:
    if not fingerprint:
        return
    if path.exists():
        found = path.read_text(encoding="utf-8")
        if json.loads(found) != json.loads(fingerprint):
            raise InputError(
                f"{path}: the output prefix holds chunks of another model, input or chunking ({found.strip()}); "
                "give the job a new output prefix"
            )
        return
    path.write_text(fingerprint, encoding="utf-8")


class Stop(Exception):
    """SIGTERM: Kueue evicted the shard (preemption or pause) or the pod is going away."""


def run(engine: list[str]) -> int:
    index = env_int("JOB_COMPLETION_INDEX")
    shard_size, chunk_size, total = env_int("BATCH_SHARD_LINES"), env_int("BATCH_CHUNK_LINES"), env_int("BATCH_TOTAL_LINES")
    start, stop = index * shard_size, min((index + 1) * shard_size, total)
    out_dir = Path(os.environ["BATCH_OUTPUT_DIR"]) / f"shard-{index:05d}"
    scratch = Path(os.environ.get("BATCH_SCRATCH_DIR", "/tmp"))
    out_dir.mkdir(parents=True, exist_ok=True)
    check_fingerprint(out_dir / FINGERPRINT_FILE, os.environ.get("BATCH_FINGERPRINT", ""))
    lines = shard_lines(input_files(), start, stop)
    models = engine_model_names(engine)
    seen_ids: set[str] = set()
    chunk, done, ran = 0, 0, 0
    while True:
        batch = [next(lines, None) for _ in range(chunk_size)]
        requests = [(f"{file}:{number}", line) for item in batch if item is not None for file, number, line in [item]]
        if not requests:
            break
        target = out_dir / f"chunk-{chunk:05d}.jsonl"
        checked = [checked_request(where, line, models) for where, line in requests]
        ids = [r["custom_id"] for r in checked]
        for where, custom_id in zip((w for w, _ in requests), ids):
            if custom_id in seen_ids:
                raise InputError(f"{where}: custom_id {custom_id!r} repeats within the shard")
            seen_ids.add(custom_id)
        if target.exists():
            print(f"shard {index} chunk {chunk}: done before, skipped", flush=True)
            done += 1
        else:
            chunk_in = scratch / f"shard-{index:05d}-chunk-{chunk:05d}.in.jsonl"
            partial = target.with_name(target.name + ".tmp")
            chunk_in.write_text("".join(line + "\n" for _, line in requests), encoding="utf-8")
            print(f"shard {index} chunk {chunk}: {len(requests)} requests", flush=True)
            process = subprocess.Popen([*engine, "-i", str(chunk_in), "-o", str(partial)])
            try:
                code = process.wait()
            except Stop:
                process.send_signal(signal.SIGTERM)
                process.wait()
                raise
            if code != 0:
                raise EngineError(f"chunk {chunk}: the engine exited with {code}")
            checked_output(partial, ids)
            os.replace(partial, target)
            chunk_in.unlink()
            ran += 1
        chunk += 1
    print(f"shard {index}: {chunk} chunks, {done} done before, {ran} run now", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit("usage: batch_runner.py <engine command...>")

    def stop(signum: int, frame: object) -> None:
        raise Stop()

    signal.signal(signal.SIGTERM, stop)
    status = Path(os.environ.get("BATCH_STATUS_FILE", "/tmp/batch-runner-exit"))
    code = 1
    try:
        code = run(argv)
    except Stop:
        print("stopped: the unfinished chunk runs again when the shard resumes", flush=True)
        code = 143
    except (InputError, EngineError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        code = 2 if isinstance(error, InputError) else 1
    finally:
        status.parent.mkdir(parents=True, exist_ok=True)
        status.write_text(str(code), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
