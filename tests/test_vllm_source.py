"""What the platform relies on in vLLM, checked in vLLM's pinned source release (platform_config/pins.py
VLLM_SOURCE: PyPI's vllm-0.18.0.tar.gz, downloaded by `make upstream-sources` and read through
tests/helpers.py vllm_source): what the `vllm/vllm-openai` image installs (docker/Dockerfile), what
its pods' python3 imports from huggingface_hub, and the flags `vllm run-batch` takes."""

from __future__ import annotations

import ast
import copy
import hashlib
import re
import shlex
import tomllib
from typing import Any

import pytest

from components.specs.batch_job import RUNNER_SOURCE, engine_command
from components.specs.pod import _HF_ADAPTER_DOWNLOAD
from platform_config.models import ServerArgs
from platform_config.pins import VLLM, VLLM_SOURCE, VLLM_VERSION, SourceReleasePin

from .helpers import raw_stack, validate, vllm_source
from .test_batch_job_adapters import review_labels, with_adapter_job
from .upstream_sources import fetch, release_path

# --- the pin and its download ---------------------------------------------------------------


@pytest.mark.upstream_source
def test_the_source_release_is_the_pinned_vllm_version():
    assert VLLM_SOURCE.filename == f"vllm-{VLLM_VERSION}.tar.gz" and VLLM.tag == f"v{VLLM_VERSION}"
    assert f"\nVersion: {VLLM_VERSION}\n" in vllm_source("PKG-INFO")


def test_a_source_release_is_kept_only_with_its_pinned_hash(tmp_path):
    served = tmp_path / "served" / "pkg-1.0.tar.gz"
    served.parent.mkdir()
    served.write_bytes(b"release")
    good = SourceReleasePin(served.as_uri(), hashlib.sha256(b"release").hexdigest())
    cache = tmp_path / "cache"
    assert fetch(good, cache) is None and release_path(good, cache).read_bytes() == b"release"
    # A file that is not the pinned one is downloaded again.
    release_path(good, cache).write_bytes(b"tampered")
    assert fetch(good, cache) is None and release_path(good, cache).read_bytes() == b"release"

    other = tmp_path / "other"
    wrong = SourceReleasePin(served.as_uri(), "0" * 64)
    assert f"sha256 {good.sha256}, not the pinned {'0' * 64}" in str(fetch(wrong, other))
    missing = SourceReleasePin((tmp_path / "served" / "gone-1.0.tar.gz").as_uri(), good.sha256)
    assert str(fetch(missing, other)).startswith(f"could not download {missing.url}")
    assert not other.exists() or not any(other.iterdir())


# --- the image: docker/Dockerfile ------------------------------------------------------------


def dockerfile_stages(text: str) -> dict[str, tuple[str, list[str]]]:
    """Each named stage of a Dockerfile: its FROM image and its instructions, continuation lines
    joined (comment lines dropped, as Docker does, also inside a continued instruction)."""
    stages: dict[str, tuple[str, list[str]]] = {}
    instructions: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped.removesuffix("\\") + " "
        if stripped.endswith("\\"):
            continue
        instruction, pending = pending.strip(), ""
        words = instruction.split()
        if words[0].upper() == "FROM":
            image, *alias = [w for w in words[1:] if not w.startswith("--")]
            instructions = []
            if len(alias) == 2 and alias[0].upper() == "AS":
                stages[alias[1]] = (image, instructions)
        else:
            instructions.append(instruction)
    return stages


def stage_chain(stages: dict[str, tuple[str, list[str]]], final: str) -> list[str]:
    """The final stage and the stages it is built FROM, in that order."""
    chain = [final]
    while stages[chain[-1]][0] in stages:
        chain.append(stages[chain[-1]][0])
    return chain


def shell_commands(instruction: str) -> list[list[str]]:
    """A RUN instruction's shell commands (split at unquoted `&&`, `||`, `;`, `|`, parentheses), each
    as its words."""
    lexer = shlex.shlex(instruction.removeprefix("RUN "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in ("&&", "||", ";", "|", "(", ")"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def pip_installs(command: list[str]) -> dict[str, str]:
    """The requirements a `pip install` / `uv pip install` command names, by normalised name."""
    if "install" not in command or "pip" not in command[: command.index("install")]:
        return {}
    found: dict[str, str] = {}
    words = iter(command[command.index("install") + 1 :])
    for word in words:
        if word.startswith("-"):
            if word in ("-r", "-c", "--python", "--index-url", "--extra-index-url"):
                next(words, None)
            continue
        name = re.match(r"[A-Za-z0-9._-]+", word)
        if name:
            found[re.sub(r"[-_.]+", "-", name.group()).lower()] = word
    return found


@pytest.fixture(scope="module")
def openai_image() -> dict[str, list[str]]:
    """The instructions of each stage the `vllm-openai` target (the `vllm/vllm-openai` image) is
    built from, in docker/Dockerfile at 0.18.0."""
    stages = dockerfile_stages(vllm_source("docker/Dockerfile"))
    chain = stage_chain(stages, "vllm-openai")
    # vllm-openai FROM vllm-openai-base FROM vllm-base FROM ${FINAL_BASE_IMAGE} (the CUDA base image).
    assert chain == ["vllm-openai", "vllm-openai-base", "vllm-base"], chain
    return {name: stages[name][1] for name in chain}


def installed_in(openai_image: dict[str, list[str]]) -> dict[str, tuple[str, str]]:
    """Every requirement a RUN of the image's stages installs: name -> (stage, as written)."""
    return {
        name: (stage, spec)
        for stage, instructions in openai_image.items()
        for instruction in instructions
        if instruction.startswith("RUN ")
        for command in shell_commands(instruction)
        for name, spec in pip_installs(command).items()
    }


@pytest.mark.upstream_source
def test_the_vllm_image_installs_the_runai_streamer_with_s3_and_hf_transfer(openai_image):
    """docker/Dockerfile at 0.18.0, stage `vllm-base` ("Install vllm-openai dependencies"):
    `uv pip install --system accelerate hf_transfer modelscope ... "runai-model-streamer[s3,gcs,azure]
    ${RUNAI_MODEL_STREAMER_VERSION}"` (>=0.15.7), which `--load-format runai_streamer` from S3 needs.
    Only the stages the image is built from count: the `test` stage installs hf_transfer as well."""
    installed = installed_in(openai_image)
    stage, streamer = installed["runai-model-streamer"]
    extras = re.search(r"\[([^\]]*)\]", streamer)
    assert stage == "vllm-base" and extras is not None and "s3" in extras.group(1).split(","), streamer
    assert installed["hf-transfer"][0] == "vllm-base"


@pytest.mark.upstream_source
def test_the_vllm_image_runs_python3_with_vllm_installed_into_it(openai_image):
    """The adapter fetch and the batch runner run `python3` in the vLLM image (components/specs/pod.py
    adapter_fetch_containers, components/specs/batch_job.py runner_container). docker/Dockerfile at
    0.18.0, stage `vllm-base`: `update-alternatives --install /usr/bin/python3 python3
    /usr/bin/python${PYTHON_VERSION}`, then `uv pip install --system -r requirements/cuda.txt` and the
    vLLM wheel with `--system`, into that interpreter."""
    commands = [c for instruction in openai_image["vllm-base"] for c in shell_commands(instruction)]
    assert any(c[:4] == ["update-alternatives", "--install", "/usr/bin/python3", "python3"] for c in commands)
    installs = [c for c in commands if pip_installs(c) or "-r" in c]
    assert any("--system" in c and "/tmp/requirements-cuda.txt" in c for c in installs)
    assert any("--system" in c and "dist/*.whl" in c for c in installs)


def requirement_names(text: str) -> dict[str, str]:
    """A requirements file's requirements by normalised name (comments, `-r` lines and markers aside)."""
    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        name = re.match(r"[A-Za-z0-9._-]+", line)
        if name and not line.startswith("-"):
            found[re.sub(r"[-_.]+", "-", name.group()).lower()] = line
    return found


def locked_via(lock: str, name: str) -> set[str]:
    """What a uv-compiled lock says pulls a package in: the `# via` names under its `name==` line."""
    lines = lock.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}=="))
    via: set[str] = set()
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        via.update(re.findall(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9._-]+)$", line))
    return via - {"via"}


def huggingface_hub_calls(source: str) -> dict[str, set[str]]:
    """The huggingface_hub functions a module calls, each with the keywords it passes
    (`from huggingface_hub import f` then `f(...)`, or `huggingface_hub.f(...)`)."""
    tree = ast.parse(source)
    imported = {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "huggingface_hub"
        for alias in node.names
    }
    calls: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in imported:
            name = imported[func.id]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "huggingface_hub":
            name = func.attr
        else:
            continue
        calls.setdefault(name, set()).update(k.arg for k in node.keywords if k.arg)
    return calls


# vLLM 0.18.0's own calls of the huggingface_hub functions the platform calls, with their keywords.
VLLM_HUGGINGFACE_HUB_CALLERS = (
    "vllm/lora/utils.py",  # huggingface_hub.snapshot_download(repo_id=...)
    "vllm/model_executor/model_loader/weight_utils.py",  # snapshot_download(revision=), hf_hub_download(revision=)
    "vllm/model_executor/model_loader/tensorizer.py",  # snapshot_download(local_dir=)
    "vllm/assets/video.py",  # hf_hub_download(repo_type="dataset")
)


@pytest.mark.upstream_source
def test_the_huggingface_hub_calls_of_the_pods_are_ones_vllm_makes():
    """The adapter fetch (`python3 -c`, components/specs/pod.py) calls
    `huggingface_hub.snapshot_download(repo_id=, revision=, local_dir=)` and the batch runner
    `hf_hub_download(repo, file, repo_type=, revision=)`, in the vLLM image.

    huggingface_hub is not a requirement of vLLM itself: requirements/common.txt at 0.18.0 (which
    requirements/cuda.txt includes, `-r common.txt`) names `transformers >= 4.56.0, < 5` and
    `tokenizers`, and vLLM's own lock (requirements/test.txt, uv-compiled) pulls huggingface-hub in
    "via" transformers and tokenizers. Its source is not in vLLM's release, so what is checked is
    that vLLM 0.18.0 itself makes these calls with these keywords: any huggingface_hub vLLM runs
    with takes them."""
    common = requirement_names(vllm_source("requirements/common.txt"))
    assert "huggingface-hub" not in common and common["transformers"] == "transformers >= 4.56.0, < 5"
    assert "tokenizers" in common and vllm_source("requirements/cuda.txt").splitlines()[1] == "-r common.txt"
    assert {"transformers", "tokenizers"} <= locked_via(vllm_source("requirements/test.txt"), "huggingface-hub")

    ours = huggingface_hub_calls(_HF_ADAPTER_DOWNLOAD)
    for name, keywords in huggingface_hub_calls(RUNNER_SOURCE.read_text()).items():
        ours.setdefault(name, set()).update(keywords)
    assert set(ours) == {"snapshot_download", "hf_hub_download"}, ours
    vllms: dict[str, set[str]] = {}
    for path in VLLM_HUGGINGFACE_HUB_CALLERS:
        for name, keywords in huggingface_hub_calls(vllm_source(path)).items():
            vllms.setdefault(name, set()).update(keywords)
    for name, keywords in ours.items():
        assert keywords <= vllms.get(name, set()), (name, keywords - vllms.get(name, set()))


# --- `vllm run-batch`: vllm/entrypoints/openai/run_batch.py ----------------------------------


def class_fields(tree: ast.Module, name: str) -> list[str]:
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def function(tree: ast.Module, qualified: str) -> ast.FunctionDef:
    """A module-level function, or a method as `Class.method`."""
    *owner, name = qualified.split(".")
    body = tree.body
    if owner:
        (cls,) = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner[0]]
        body = cls.body
    (found,) = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    return found


def literal_flags(node: ast.AST) -> set[str]:
    """The flags the `add_argument("--flag", "-f", ...)` calls in a function spell out."""
    return {
        arg.value
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")
    }


def assert_run_batch_uses_make_arg_parser() -> None:
    """`vllm run-batch` at 0.18.0: the `vllm` script is vllm.entrypoints.cli.main:main
    (pyproject.toml), whose CMD_MODULES include vllm.entrypoints.cli.run_batch, whose subcommand
    `run-batch` builds its parser with entrypoints/openai/run_batch.py `make_arg_parser`."""
    scripts = tomllib.loads(vllm_source("pyproject.toml"))["project"]["scripts"]
    assert scripts["vllm"] == "vllm.entrypoints.cli.main:main", scripts
    main = ast.unparse(ast.parse(vllm_source("vllm/entrypoints/cli/main.py")))
    assert "vllm.entrypoints.cli.run_batch" in main[main.index("CMD_MODULES") :]
    command = ast.parse(vllm_source("vllm/entrypoints/cli/run_batch.py"))
    names = [
        s.value.value
        for s in ast.walk(command)
        if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "name" and isinstance(s.value, ast.Constant)
    ]
    assert names == ["run-batch"], names
    init = ast.unparse(function(command, "RunBatchSubcommand.subparser_init"))
    assert "from vllm.entrypoints.openai.run_batch import make_arg_parser" in init
    assert "make_arg_parser(run_batch_parser)" in init


def run_batch_flags() -> set[str]:
    """Every flag `vllm run-batch` defines at 0.18.0. Its parser (assert_run_batch_uses_make_arg_parser)
    is run_batch.py `make_arg_parser`: `BatchFrontendArgs.add_cli_args` (one `--<field>`
    per field of BatchFrontendArgs and its base BaseFrontendArgs, entrypoints/openai/cli_args.py
    `add_cli_args`, plus the extra flags `_customize_cli_kwargs` gives: `-i`, `-o`), then
    `AsyncEngineArgs.add_cli_args` (its own `add_argument`s and EngineArgs.add_cli_args',
    engine/arg_utils.py, each flag spelt out). Not listed: the `--no-` forms argparse adds to
    boolean flags (the jobs pass none)."""
    run_batch = ast.parse(vllm_source("vllm/entrypoints/openai/run_batch.py"))
    registered = [
        ast.unparse(call.func)
        for call in ast.walk(function(run_batch, "make_arg_parser"))
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
    ]
    assert registered == ["BatchFrontendArgs.add_cli_args", "AsyncEngineArgs.add_cli_args"], registered
    cli_args = ast.parse(vllm_source("vllm/entrypoints/openai/cli_args.py"))
    add_cli_args = ast.unparse(function(cli_args, "BaseFrontendArgs.add_cli_args"))
    assert "*extra_flags, f\"--{key.replace('_', '-')}\"" in add_cli_args, "BaseFrontendArgs names its flags otherwise"
    fields = class_fields(run_batch, "BatchFrontendArgs") + class_fields(cli_args, "BaseFrontendArgs")
    flags = {"--" + f.replace("_", "-") for f in fields}
    customize = function(run_batch, "BatchFrontendArgs._customize_cli_kwargs")
    for node in ast.walk(customize):
        # frontend_kwargs["input_file"]["flags"] = ["-i"]
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and "['flags']" in ast.unparse(node.targets[0]):
            flags |= {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    arg_utils = ast.parse(vllm_source("vllm/engine/arg_utils.py"))
    engine = function(arg_utils, "AsyncEngineArgs.add_cli_args")
    assert "EngineArgs.add_cli_args" in ast.unparse(engine)
    return flags | literal_flags(engine) | literal_flags(function(arg_utils, "EngineArgs.add_cli_args"))


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
        "maxNumPartialPrefills": 2,
        "longPrefillTokenThreshold": 1024,
        "kvCacheDtype": "fp8",
        "blockSize": 16,
        "cpuOffloadGb": 1.5,
        "seed": 0,
        "tokenizerMode": "auto",
        "maxLogprobs": 20,
    }
    # A setting added to ServerArgs must be added here too.
    assert ServerArgs.model_validate(job["model"]["server"]).model_fields_set == set(ServerArgs.model_fields)
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
    of vllm/entrypoints/openai/run_batch.py at 0.18.0 (run_batch_flags)."""
    assert_run_batch_uses_make_arg_parser()
    defined = run_batch_flags()
    plans = [*validate(raw_stack("prod")).batch_jobs, review_labels(with_adapter_job()), review_labels(every_setting_job())]
    ours = {arg for plan in plans for arg in engine_command(plan)[2:] if arg.startswith("-")}
    ours |= runner_chunk_flags()
    assert {"-i", "-o", "--model", "--revision", "--lora-modules", "--enforce-eager", "--max-logprobs"} <= ours
    assert sorted(ours - defined) == []
    # The parse is not vacuous: flags run-batch does not take are not found.
    assert not {"--port-offset", "--enable-magic"} & defined and {"--host", "--output-tmp-dir"} <= defined
