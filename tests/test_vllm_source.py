"""What the platform relies on in vLLM, checked in vLLM's pinned source release (platform_config/pins.py
VLLM_SOURCE: PyPI's vllm-0.33.0.tar.gz, downloaded by `make upstream-sources` and read through
tests/helpers.py vllm_source): what the `vllm/vllm-openai` image installs (docker/Dockerfile), what
its pods' python3 imports from huggingface_hub, and how its admission bounds a queue. The flags
`vllm serve` and `vllm run-batch` take: tests/test_vllm_flags.py."""

from __future__ import annotations

import ast
import hashlib
import re
import shlex

import pytest

from components.specs.batch_job import RUNNER_SOURCE
from components.specs.scripts import HF_DOWNLOAD_SCRIPT
from platform_config.pins import VLLM, VLLM_SOURCE, VLLM_VERSION, SourceReleasePin
from preview.vllm_release import function, release_path, serve_flags

from .helpers import vllm_release, vllm_source
from .upstream_sources import fetch

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
    built from, in docker/Dockerfile at 0.33.0."""
    stages = dockerfile_stages(vllm_source("docker/Dockerfile"))
    chain = stage_chain(stages, "vllm-openai")
    # vllm-openai FROM vllm-openai-base FROM vllm-base FROM vllm-runtime-base FROM ${FINAL_BASE_IMAGE} (the CUDA
    # base image); 0.18.0 had no vllm-runtime-base.
    assert chain == ["vllm-openai", "vllm-openai-base", "vllm-base", "vllm-runtime-base"], chain
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
def test_the_vllm_image_installs_the_runai_streamer_with_s3(openai_image):
    """docker/Dockerfile at 0.33.0, stage `vllm-runtime-base`: `uv pip install --system accelerate modelscope ...
    "runai-model-streamer[s3,gcs,azure]${RUNAI_MODEL_STREAMER_VERSION}"`, which `--load-format runai_streamer`
    from S3 needs. Only the stages the image is built from count. (hf_transfer, which 0.18.0's image installed, is
    gone since 0.19.1; the platform never used it.)"""
    installed = installed_in(openai_image)
    stage, streamer = installed["runai-model-streamer"]
    extras = re.search(r"\[([^\]]*)\]", streamer)
    assert stage == "vllm-runtime-base" and extras is not None and "s3" in extras.group(1).split(","), streamer


@pytest.mark.upstream_source
def test_the_vllm_image_runs_python3_with_vllm_installed_into_it(openai_image):
    """The adapter fetch and the batch runner run `python3` in the vLLM image (components/specs/vllm_parts.py
    adapter_fetch_containers, components/specs/batch_job.py runner_container). docker/Dockerfile at
    0.33.0, stage `vllm-runtime-base`: `update-alternatives --install /usr/bin/python3 python3
    /usr/bin/python${PYTHON_VERSION}`, then `uv pip install --system -r /tmp/requirements-cuda.txt`; stage
    `vllm-base` (FROM it) installs the vLLM wheel with `--system`, into that interpreter."""

    def commands(stage: str) -> list[list[str]]:
        return [c for instruction in openai_image[stage] for c in shell_commands(instruction)]

    runtime, base = commands("vllm-runtime-base"), commands("vllm-base")
    assert any(c[:4] == ["update-alternatives", "--install", "/usr/bin/python3", "python3"] for c in runtime)
    assert any("--system" in c and "/tmp/requirements-cuda.txt" in c for c in runtime if pip_installs(c) or "-r" in c)
    assert any("--system" in c and "dist/*.whl" in c for c in base if pip_installs(c))


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
    (`from huggingface_hub import f` then `f(...)`, or `huggingface_hub.f(...)`), and the methods of
    huggingface_hub's HfApi it calls on vLLM's shared client (`hf_api().f(...)`, vllm/transformers_utils/
    repo_utils.py `hf_api`, which returns an `HfApi`: its methods take the module functions' parameters)."""
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
        elif isinstance(func, ast.Attribute) and ast.unparse(func.value) == "hf_api()":
            name = func.attr
        else:
            continue
        calls.setdefault(name, set()).update(k.arg for k in node.keywords if k.arg)
    return calls


# vLLM 0.33.0's own calls of the huggingface_hub functions the platform calls, with their keywords.
VLLM_HUGGINGFACE_HUB_CALLERS = (
    "vllm/lora/utils.py",  # hf_api().snapshot_download(repo_id=...)
    "vllm/model_executor/model_loader/weight_utils.py",  # hf_api().snapshot_download(revision=), hf_hub_download
    "vllm/model_executor/model_loader/tensorizer.py",  # hf_api().snapshot_download(local_dir=)
    "vllm/assets/video.py",  # hf_api().hf_hub_download(repo_type="dataset")
)


@pytest.mark.upstream_source
def test_the_huggingface_hub_calls_of_the_pods_are_ones_vllm_makes():
    """The adapter fetch (`python3 -c`, components/specs/vllm_parts.py) calls
    `huggingface_hub.snapshot_download(repo_id=, revision=, local_dir=)` and the batch runner
    `hf_hub_download(repo, file, repo_type=, revision=)`, in the vLLM image.

    At 0.33.0 huggingface_hub is a requirement of vLLM itself: requirements/common.txt (which
    requirements/cuda.txt includes, `-r common.txt`) names `huggingface_hub >= 1.31.0`, and vLLM's own lock
    (requirements/test/cuda.txt, uv-compiled) pins 1.31.0. Its source is not in vLLM's release, so what is
    checked is that vLLM 0.33.0 itself makes these calls with these keywords: any huggingface_hub vLLM runs
    with takes them."""
    common = requirement_names(vllm_source("requirements/common.txt"))
    assert common["huggingface-hub"].startswith("huggingface_hub >= 1.31.0"), common["huggingface-hub"]
    assert vllm_source("requirements/cuda.txt").splitlines()[1] == "-r common.txt"
    assert "huggingface-hub==1.31.0" in vllm_source("requirements/test/cuda.txt").splitlines()

    ours = huggingface_hub_calls(HF_DOWNLOAD_SCRIPT)
    for name, keywords in huggingface_hub_calls(RUNNER_SOURCE.read_text()).items():
        ours.setdefault(name, set()).update(keywords)
    assert set(ours) == {"snapshot_download", "hf_hub_download"}, ours
    vllms: dict[str, set[str]] = {}
    for path in VLLM_HUGGINGFACE_HUB_CALLERS:
        for name, keywords in huggingface_hub_calls(vllm_source(path)).items():
            vllms.setdefault(name, set()).update(keywords)
    for name, keywords in ours.items():
        assert keywords <= vllms.get(name, set()), (name, keywords - vllms.get(name, set()))


# --- admission control: the queue bound of servers no endpoint picker times ---------------------------


def test_vllms_admission_answers_503_before_a_request_is_queued_whatever_its_priority():
    """The bound Knative-served models (and Deployments without a picker) keep on their queue
    (platform_config/serving.py ServerAdmission), as vLLM 0.33.0 enforces it: `AsyncLLM.check_admission`
    compares the unfinished requests with `--max-num-queued-reqs` and the prompt tokens still in prefill with
    `--max-num-queued-tokens`, raising errors that carry 503; the chat and completion endpoints call it in
    `_preflight`, before they render the prompt or start a response (streamed or not), and `_add_request` calls it
    again when the request joins the engine, which for a streamed request is inside its 200 stream (the README's race:
    a burst that passed the first check together is refused there as an error event); and it reads no priority, so
    one bound holds for every tier of a server."""
    admission = ast.unparse(function(ast.parse(vllm_source("vllm/v1/engine/async_llm.py")), "AsyncLLM.check_admission"))
    assert "self.scheduler_config.max_num_queued_reqs" in admission
    assert "self.scheduler_config.max_num_queued_tokens" in admission
    assert "raise QueueOverflowError()" in admission and "raise MaxQueuedTokensError()" in admission
    assert "priority" not in admission

    exceptions = ast.parse(vllm_source("vllm/exceptions.py"))
    for name in ("QueueOverflowError", "MaxQueuedTokensError"):
        (cls,) = [n for n in exceptions.body if isinstance(n, ast.ClassDef) and n.name == name]
        assert [ast.unparse(b) for b in cls.bases] == ["GracefulHTTPError"]
        assert "HTTPStatus.SERVICE_UNAVAILABLE" in ast.unparse(cls)
    rendered = vllm_source("vllm/entrypoints/serve/exception_handling/error_response.py")
    assert "if isinstance(exc, GracefulHTTPError):" in rendered and "status_code = exc.http_status" in rendered

    preflight = ast.unparse(
        function(ast.parse(vllm_source("vllm/entrypoints/generate/base/serving.py")), "GenerateBaseServing._preflight")
    )
    assert "self.engine_client.check_admission(n)" in preflight
    for endpoint in ("vllm/entrypoints/openai/chat_completion/serving.py", "vllm/entrypoints/openai/completion/serving.py"):
        assert "self._preflight(request.n or 1)" in vllm_source(endpoint)
    (engine,) = [n for n in ast.parse(vllm_source("vllm/v1/engine/async_llm.py")).body if getattr(n, "name", "") == "AsyncLLM"]
    (add_request,) = [n for n in ast.walk(engine) if isinstance(n, ast.AsyncFunctionDef) and n.name == "_add_request"]
    add = ast.unparse(add_request)
    assert "self.check_admission(request_id=request.request_id)" in add
    assert {"--max-num-queued-reqs", "--max-num-queued-tokens"} <= serve_flags(vllm_release())
