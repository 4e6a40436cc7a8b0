"""Where weights and inputs come from, and the source-URI facts: a Hugging Face repository at a commit, an S3
prefix and its version folder, or an MLflow registry version; the one-string location a pinned source names."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from ..s3_locations import s3_parts
from .base import ConfigModel, _full_match
from .registry import MlflowReference

# An S3 location the platform puts into shell scripts, IAM policy resources and annotations: a bucket
# name by S3's rules, then a key of letters, digits and `-_.=/` only (S3's safe characters less those a
# shell, an IAM ARN or a glob reads specially: `*`, `'`, `(`, `)`, `!`, and no space, `$`, `;` or `|`),
# at most 1,024 characters (S3's key limit).
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._=/-]{0,1024})?$"
_S3 = re.compile(S3_URI_PATTERN.removeprefix("^").removesuffix("$"))


def _whole_segments(uri: str) -> str:
    s3_parts(uri)  # ValueError, saying what is allowed, for an empty path segment (`//`)
    return uri


# An S3 location config gives (weights, adapters, batch inputs and outputs, tenants' prefixes): of S3_URI_PATTERN, and
# of whole path segments by the rule every S3 location is read by (s3_parts): no `//` after the bucket, which S3 would
# read as another key prefix than the IAM grants and the tenants' checks compare. Two rules, since `Field(pattern=)`
# runs in pydantic-core's Rust regex engine (no lookahead) and the pattern bounds the key's length.
S3Location = Annotated[str, Field(pattern=S3_URI_PATTERN), AfterValidator(_whole_segments)]
# A Hugging Face repository id `org/name` by the Hub's own rule (huggingface_hub v1.28.0
# src/huggingface_hub/utils/_validators.py, validate_repo_id: "[a-zA-Z0-9] or '-', '_', '.'", a name of 1 to 96
# characters starting and ending with a letter, digit or '_' (its `\b`s), no '--' or '..', not ending in '.git').
# Its REPO_ID_REGEX writes the letters as `\w`, which Python's `re` takes to be any Unicode letter unless re.ASCII
# is given (it is not, at v1.28.0): here they are ASCII by class, and the owner, which the rule gives no length,
# has the name's. The owner is required: a model or dataset here always has one.
_HF_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HF_REPOSITORY = rf"{_HF_PART}/{_HF_PART}"
HF_REPOSITORY_MAX_LENGTH = 96 + 1 + 96


def _hub_repository_rules(value: str) -> str:
    if "--" in value or ".." in value or value.endswith(".git"):
        raise ValueError(f"{value!r} is not a Hugging Face repository id: no '--' or '..', and not ending in '.git'")
    return value


HuggingFaceRepository = Annotated[
    str,
    _full_match(
        _HF_REPOSITORY,
        "is not a Hugging Face repository id 'org/name': each part 1-96 ASCII letters, digits, '_', '-' or '.', starting "
        "and ending with a letter, digit or '_'",
        HF_REPOSITORY_MAX_LENGTH,
    ),
    AfterValidator(_hub_repository_rules),
]
# The commit SHA that pins a Hugging Face repository (never a branch or a tag): a model's revision and a batch job's
# input are held to the same pattern.
COMMIT_SHA = r"[0-9a-f]{40}"
# The version folder under an S3 prefix that pins S3 weights, adapters or a batch input (their `revision`): one path
# segment of letters, digits and `._=-`, starting with a letter or digit (so never `.` or `..`), at most 128
# characters. It lands in shell scripts (single-quoted), IAM policy resources and annotations, so nothing a shell, a
# glob or an IAM ARN reads specially (`*`, `?`, `'`, `$`, a space) is allowed.
S3_VERSION_FOLDER = r"[A-Za-z0-9][A-Za-z0-9._=-]{0,127}"
# A source's `revision`, before the source says which of the two it must be.
Revision = Annotated[
    str,
    _full_match(
        rf"{COMMIT_SHA}|{S3_VERSION_FOLDER}",
        "is not a revision: a 40-character commit SHA (Hugging Face) or a version folder (S3: one path segment of "
        "letters, digits and '._=-', starting with a letter or digit, at most 128 characters)",
        128,
    ),
]
# The one-string locations of pinned weights (`weights_location`, `pinned_source`): what a registry version names.
_HF_PINNED = re.compile(rf"hf://(?P<repo>{_HF_REPOSITORY})@(?P<revision>{COMMIT_SHA})")
PINNED_FORMS = (
    "hf://org/name@<40-character commit SHA> or s3://bucket/prefix/<version folder>, with one '/' between the S3 "
    "path's segments (no '//')"
)


class ModelSource(ConfigModel):
    huggingface: HuggingFaceRepository | None = None
    """Hugging Face repository `org/name`."""
    s3_uri: S3Location | None = None
    """S3 prefix holding the weights (needs EKS: read with the model's workload role); one `/` between its path
    segments (S3 reads `a//b` as another key prefix than `a/b`)."""
    revision: Revision | None = None
    """Hugging Face: the full 40-character commit SHA (never a branch); S3: the subfolder of the version. Not given
    with `mlflow`: the registry names it."""
    mlflow: MlflowReference | None = None
    """A model version in the MLflow registry (`registry` config), resolved at every preview and `pulumi up`: served
    are the weights its `registry.weightsTag` tag names, else its source URI, which must be pinned
    (`hf://org/name@<commit SHA>`, or `s3://bucket/prefix/<folder>`: the last segment is the version's subfolder).
    The version each reference resolved to is on its pods' annotations and in the `modelRegistry` stack output."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSource:
        given = [self.huggingface is not None, self.s3_uri is not None, self.mlflow is not None]
        if sum(given) != 1:
            raise ValueError(
                "give exactly one of 'huggingface' (org/name), 's3Uri' (s3://bucket/prefix) or 'mlflow' ({model, alias} "
                "or {model, version})"
            )
        if self.mlflow is not None:
            if self.revision is not None:
                raise ValueError("'revision' is not given with 'mlflow': the registry's version names the weights")
            return self
        if self.revision is None:
            raise ValueError("'revision' is required: the commit SHA (Hugging Face) or the version's subfolder (S3)")
        if self.huggingface is not None and not re.fullmatch(COMMIT_SHA, self.revision):
            raise ValueError(
                f"revision {self.revision!r} is not pinned: give the 40-character commit SHA of the model repository"
            )
        return self


class BatchInput(ConfigModel):
    """An OpenAI batch-format JSONL file set (one request per line: `custom_id`, `method`, `url`, `body`), pinned."""

    s3_uri: S3Location | None = None
    """S3 prefix; the files are `<s3Uri>/<revision>/*.jsonl`, read in name order. One `/` between its path segments
    (no `//`)."""
    huggingface: HuggingFaceRepository | None = None
    """Hugging Face dataset repository `org/name`."""
    revision: Revision | None = None
    """Pins the input: the dataset's 40-character commit SHA (Hugging Face), or the version folder under `s3Uri` that
    is never rewritten (S3)."""
    files: Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_./-]{1,512}\.jsonl$")]], Field(min_length=1)] | None = None
    """Hugging Face: the JSONL files in the dataset, in order (S3 reads every `.jsonl` file of the folder)."""

    @model_validator(mode="after")
    def _one_source(self) -> BatchInput:
        if (self.s3_uri is None) == (self.huggingface is None):
            raise ValueError("give exactly one of 's3Uri' (s3://bucket/prefix) or 'huggingface' (org/dataset)")
        if self.huggingface is not None and self.files is None:
            raise ValueError("a Hugging Face dataset needs 'files': its JSONL files in order")
        if self.s3_uri is not None and self.files is not None:
            raise ValueError("'files' is for Hugging Face datasets: an S3 input reads every .jsonl file of its folder")
        return self


def pinned_s3_uri(source: ModelSource | BatchInput) -> str:
    """A pinned S3 source's version folder: its prefix and its revision (weights, adapters, a batch job's input, the
    weight mirror's copies)."""
    assert source.s3_uri is not None, "an S3 source"
    return f"{source.s3_uri.rstrip('/')}/{source.revision}/"


def weights_location(source: ModelSource) -> str | None:
    """The weights a concrete source names, as one string (`pinned_source`'s inverse): what a release records per
    version, so that weights changed under a version's name are seen."""
    if source.huggingface is not None and source.revision is not None:
        return f"hf://{source.huggingface}@{source.revision}"
    if source.s3_uri is not None and source.revision is not None:
        return pinned_s3_uri(source).rstrip("/")
    return None  # a registry reference, not resolved yet


def pinned_source(weights: str) -> ModelSource | None:
    """The concrete source of a pinned weights location (`weights_location`'s inverse); None when it is not pinned."""
    hf = _HF_PINNED.fullmatch(weights)
    try:
        if hf is not None:
            return ModelSource(huggingface=hf["repo"], revision=hf["revision"])
        if _S3.fullmatch(weights):
            s3_parts(weights)  # an empty path segment (`//`): not the location without it, so not one a source gives
            prefix, _, folder = weights.removesuffix("/").rpartition("/")
            if prefix.count("/") >= 2 and folder:  # `s3://bucket/<folder>` at least
                return ModelSource(s3_uri=prefix, revision=folder)
    except ValueError:  # pydantic's ValidationError is one too
        return None  # of the form, but not a source config may give (`org--name`, a folder `.x` or `*`, a `//`)
    return None
