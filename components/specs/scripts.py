"""The scripts the platform's containers run (pure): the batch job's stage-in and uploader shell scripts with their
shapes for the policy pack, the Hugging Face download a server's adapters take, and the aws CLI's copy of a pinned S3
source. Every config value a script names is quoted where it is written (shell_quoted_s3) and checked where it is read
(the S3 pattern, platform_config/models/sources.py)."""

from __future__ import annotations

from platform_config.models import ModelSource, pinned_s3_uri

# The batch job's work volume: its input, the shards' output and the runner's exit status.
WORK_DIR = "/work"
INPUT_DIR = f"{WORK_DIR}/input"
OUTPUT_DIR = f"{WORK_DIR}/output"
STATUS_FILE = f"{WORK_DIR}/status/runner-exit"


def shell_quoted_s3(location: str) -> str:
    """An S3 location in a shell script: always in single quotes, where the shell expands nothing
    (shlex.quote leaves a word of safe characters bare). Its pattern already admits no quote and no
    shell metacharacter; the pack's shell-scripts-quote-config holds every script to both."""
    if "'" in location:
        raise ValueError(f"S3 location {location!r} holds a quote")
    return f"'{location}'"


def shard_prefix(output: str) -> str:
    """The shard's output prefix, in shell (the index is only known in the pod): the configured
    prefix quoted, the index's expansion not."""
    return f'{shell_quoted_s3(output.rstrip("/"))}/shard-$(printf %05d "$JOB_COMPLETION_INDEX")/'


def local_shard() -> str:
    return f'{OUTPUT_DIR}/shard-$(printf %05d "$JOB_COMPLETION_INDEX")/'


def stage_in_script(input_location: str | None, output: str) -> str:
    """Copies the input from S3 (`input_location`, the pinned version folder; None for a dataset input, which the
    runner reads itself) and the shard's finished chunks from `output`, so a resumed shard skips them."""
    steps = [f"mkdir -p {local_shard()}", f"aws s3 sync --only-show-errors {shard_prefix(output)} {local_shard()}"]
    if input_location is not None:
        steps.insert(
            0, f"aws s3 sync --only-show-errors --exclude '*' --include '*.jsonl' {shell_quoted_s3(input_location)} {INPUT_DIR}/"
        )
    return " && ".join(steps)


def uploader_script(output: str) -> str:
    """Copies finished chunks (never the `.tmp` one being written) to `output` every 30 s; on the runner's exit, or
    on SIGTERM, copies once more and exits with the runner's code."""
    sync = f"aws s3 sync --only-show-errors --exclude '*.tmp' {local_shard()} {shard_prefix(output)}"
    return "\n".join(
        [
            f"mkdir -p {local_shard()}",
            # A function, so the trap's own quoting leaves the exclude pattern quoted.
            f"upload() {{ {sync}; }}",
            "trap 'upload; exit 143' TERM",
            "while true; do",
            f'  if [ -f {STATUS_FILE} ]; then upload && exit "$(cat {STATUS_FILE})"; exit 1; fi',
            "  upload || echo 'upload failed; retrying'",
            "  sleep 30 & wait $!",
            "done",
        ]
    )


# Where a config value sits in a shell script the platform renders: an S3 location, always single-quoted by
# shell_quoted_s3. The scripts' shapes (SHELL_SCRIPT_SHAPES: each script with its config values replaced by this slot)
# reach the policy pack through its facts; its `shell-scripts-quote-config` refuses any shell script with an S3 or
# Hugging Face location that is not one of them with each slot holding a location config may give.
S3_SLOT = "{s3-location}"


def shell_script_shapes() -> tuple[str, ...]:
    """Every shell script a batch job's containers run, each config value replaced by S3_SLOT (quoted as the script
    quotes it): the stage-in with an S3 input and with a dataset input, and the uploader."""
    return (stage_in_script(S3_SLOT, S3_SLOT), stage_in_script(None, S3_SLOT), uploader_script(S3_SLOT))


HF_DOWNLOAD_SCRIPT = (
    "import sys\n"
    "from huggingface_hub import snapshot_download\n"
    "args = sys.argv[1:]\n"
    "for repo, revision, directory in zip(args[0::3], args[1::3], args[2::3]):\n"
    "    snapshot_download(repo_id=repo, revision=revision, local_dir=directory)\n"
)


def s3_sync_command(source: ModelSource, destination: str) -> list[str]:
    """The aws CLI copying a pinned S3 source (its prefix's version folder) to a local path: the
    servers' weights and adapters, and the batch jobs' weights."""
    return ["aws", "s3", "sync", "--only-show-errors", pinned_s3_uri(source), destination]
