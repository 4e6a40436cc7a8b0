"""What a model server's `vllm serve` and a batch job's `vllm run-batch` share (pure builders): the
model volume's paths, vLLM's LoRA flags and the init containers that fetch adapter modules onto that
volume, and the stack's own tuning flags."""

from __future__ import annotations

import urllib.parse
from typing import Any

from platform_config.adapters import AdapterModule, LoraLimits
from platform_config.models import ServerArgs

from .pod_parts import FETCH_RESOURCES, aws_cli_container, container_security_context
from .scripts import HF_DOWNLOAD_SCRIPT, s3_sync_command

# The model volume's mount, and the Hugging Face cache on it.
MODELS_DIR = "/models"
HF_HOME = f"{MODELS_DIR}/hf"
# On the engine of a pod that reads nothing from Hugging Face itself (its weights and adapters from S3, the weight
# mirror's copies among them): any call to the Hub fails at once instead of reaching for the internet, which its
# namespace's egress does not reach in production. vLLM 0.33.0 takes it (vllm/engine/arg_utils.py
# EngineArgs.__post_init__: under HF_HUB_OFFLINE a local model path is kept, an s3:// one left to
# ModelConfig.maybe_pull_model_tokenizer_for_runai, which pulls the config and tokenizer files from the model's own
# folder and points the tokenizer, which defaults to the model, there: vllm/config/model.py).
HF_HUB_OFFLINE = {"name": "HF_HUB_OFFLINE", "value": "1"}


# --- LoRA adapters -------------------------------------------------------------------------
# vLLM 0.33.0 resolves a `--lora-modules` path that is not a local one as a Hugging Face repository
# and downloads it with `snapshot_download(repo_id=...)`, at no revision (vllm/lora/utils.py,
# get_adapter_absolute_path): a pinned revision cannot be given. So every module is downloaded at its
# pinned revision (or synced from S3) into the pod's model volume by an init container, and vLLM is
# given that absolute path, which it takes as it is.

ADAPTERS_DIR = f"{MODELS_DIR}/adapters"


# Downloads each (repository, revision, directory) triple of its arguments; huggingface_hub is
# vLLM's own dependency, in the image.
def adapter_path(module: AdapterModule) -> str:
    """Where a LoRA module's files are on the model volume (its name quoted: it may hold '/' or ':')."""
    return f"{ADAPTERS_DIR}/{urllib.parse.quote(module.name, safe='')}"


def lora_flags(lora: LoraLimits, owner: str) -> list[str]:
    """vLLM's LoRA flags (vllm/config/lora.py and vllm/entrypoints/common/cli_args.py at v0.33.0),
    for a server and for a batch job's `vllm run-batch` alike: `--lora-modules` takes `name=path`
    items (an item with '=' and no ',' is read that way; names never hold either, paths are
    quoted), and the limits sized from the adapters."""
    # The loader replaced every registry reference by the pinned source it names (platform_config/registry.py).
    assert all(m.source.mlflow is None for m in lora.modules), f"{owner}: an unresolved adapter source reached the pod"
    return [
        "--enable-lora",
        "--lora-modules",
        *(f"{module.name}={adapter_path(module)}" for module in lora.modules),
        "--max-loras",
        str(lora.max_loras),
        "--max-lora-rank",
        str(lora.max_lora_rank),
        "--max-cpu-loras",
        str(lora.max_cpu_loras),
    ]


def adapter_fetch_containers(
    lora: LoraLimits,
    image: str,
    aws_cli_image: str,
    hf_env: list[dict[str, Any]],
    volume_mounts: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Fetch the adapter modules before vLLM starts, for a server and a batch job alike: each from where its pods
    fetch it (`AdapterModule.fetched_from`): the Hugging Face ones at their pinned revisions in one container of the
    vLLM image (`image`, with `hf_env`), each S3 one (the weight mirror's copies of Hugging Face ones among them) with
    the CLI (`aws_cli_image`) as the base weights are; `volume_mounts` hold MODELS_DIR."""
    containers: list[dict[str, Any]] = []
    hugging_face = [(m, m.fetched_from) for m in lora.modules if m.fetched_from.huggingface is not None]
    if hugging_face:
        triples = [arg for m, source in hugging_face for arg in (source.huggingface, source.revision, adapter_path(m))]
        containers.append(
            {
                "name": "fetch-adapters",
                "image": image,
                "command": ["python3", "-c", HF_DOWNLOAD_SCRIPT, *triples],
                "env": hf_env,
                "resources": FETCH_RESOURCES,
                "volumeMounts": volume_mounts,
                "securityContext": container_security_context(),
            }
        )
    for index, module in enumerate(m for m in lora.modules if m.fetched_from.s3_uri is not None):
        containers.append(
            aws_cli_container(
                f"fetch-adapter-s3-{index}",
                aws_cli_image,
                s3_sync_command(module.fetched_from, adapter_path(module)),
                volume_mounts,
            )
        )
    return containers


# The stack's own vLLM settings (ServerArgs), in this order; each field's flag is its name in
# kebab case (`max_num_batched_tokens` -> `--max-num-batched-tokens`, vllm/engine/arg_utils.py
# at v0.33.0). A boolean is vLLM's BooleanOptionalAction: only `true` is written (`false` is
# vLLM's default).
TUNING_FIELDS = (
    "enforce_eager",
    "max_num_batched_tokens",
    "long_prefill_token_threshold",
    "kv_cache_dtype",
    "block_size",
    "cpu_offload_gb",
    "seed",
    "tokenizer_mode",
    "max_logprobs",
)


def tuning_flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def tuning_args(args: ServerArgs) -> list[str]:
    out: list[str] = []
    for field in TUNING_FIELDS:
        value = getattr(args, field)
        if value is None or value is False:
            continue
        out += (
            [tuning_flag(field)]
            if value is True
            else [tuning_flag(field), f"{value:g}" if isinstance(value, float) else str(value)]
        )
    return out
