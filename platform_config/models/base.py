"""The base of every config model (`ConfigModel`: camelCase keys, unknown keys refused, strict types, the docstring
under a field its description) and the field types the blocks share: names, quantities, durations, pinned images,
bounded integers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..quantity import parse_quantity

PROJECT = "inference-platform"


class ConfigModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        # The docstring under a field is its description: the config reference (docs/reference/config.md)
        # and the stack-file JSON schema are generated from them.
        use_attribute_docstrings=True,
        # Stack files use the camelCase keys only (the loader validates by alias alone); Python
        # code may build models by field name.
        validate_by_name=True,
        validate_by_alias=True,
    )


# Every pattern of a field type is applied with `fullmatch`: Python's `$` also matches before a trailing
# newline, so `re.match(r"^...$")` would let "qwen\n" through to an object name. (Field(pattern=)
# runs in pydantic-core's Rust regex engine, where `$` is the end of the text only.)

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A DNS-1123 subdomain as the API server validates one (kubernetes/apimachinery
# pkg/util/validation/validation.go at v0.33.9: IsDNS1123Subdomain): Secret names, label key prefixes.
_DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _full_match(pattern: str | re.Pattern[str], what_it_is_not: str, max_length: int | None = None) -> AfterValidator:
    """A value the whole of which matches `pattern` (never a prefix, nor a match that stops
    before a trailing newline), and is at most `max_length` characters long; the error says what
    the value is not and gives an example."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if (max_length is not None and len(value) > max_length) or not compiled.fullmatch(value):
            raise ValueError(f"{value!r} {what_it_is_not}")
        return value

    return AfterValidator(check)


def _dns_label(max_length: int, *, letter_first: bool) -> AfterValidator:
    first = "a letter" if letter_first else "a letter or digit"
    return _full_match(
        _DNS_1035 if letter_first else _DNS_1123,
        f"is not a valid name: a DNS-1123 label of lowercase letters, digits and '-', starting with {first} and ending "
        f"with a letter or digit, at most {max_length} characters",
        max_length,
    )


# Names that become Kubernetes object names with suffixes (Services must be DNS-1035 labels).
ResourceName = Annotated[str, _dns_label(30, letter_first=True)]
VersionName = Annotated[str, _dns_label(12, letter_first=True)]
NamespaceName = Annotated[str, _dns_label(40, letter_first=True)]


def _quantity(value: str) -> str:
    parse_quantity(value)
    return value


Quantity = Annotated[str, AfterValidator(_quantity)]


def _positive_quantity(value: str) -> str:
    if parse_quantity(value) <= 0:
        raise ValueError(f"{value!r} must be more than zero: a pod with no memory or CPU request is not admitted")
    return value


PositiveQuantity = Annotated[str, AfterValidator(_positive_quantity)]

# At most 15 digits: anything longer is beyond the protobuf Duration maximum anyway.
_DURATION = re.compile(r"^([0-9]{1,15})(ms|s|m|h)$")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
# google.protobuf.Duration's range (protobuf src/google/protobuf/duration.proto: "+315,576,000,000
# seconds"); Envoy and Istio refuse a longer duration.
MAX_DURATION_SECONDS = 315_576_000_000


def duration_seconds(value: str) -> float:
    match = _DURATION.fullmatch(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration: use a whole number with ms, s, m or h, e.g. '5s' or '5m'")
    seconds = int(match[1]) * _DURATION_SECONDS[match[2]]
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{value!r} is longer than the largest duration, {MAX_DURATION_SECONDS} s (protobuf's Duration)")
    return seconds


def _duration(value: str) -> str:
    duration_seconds(value)
    return value


# The schema carries the pattern too, so editors flag a bad duration before a preview does; the
# validator keeps the error message that says what is allowed.
_DURATION_SCHEMA = Field(json_schema_extra={"pattern": _DURATION.pattern})
Duration = Annotated[str, AfterValidator(_duration), _DURATION_SCHEMA]


def _duration_between(low: float, high: float):
    def check(value: str) -> str:
        seconds = duration_seconds(value)
        if not low <= seconds <= high:
            raise ValueError(f"{value!r} is outside the allowed range {low:g}s..{high:g}s")
        return value

    return AfterValidator(check)


# The image rule the policy pack enforces too (it reads these through its generated facts).
IMAGE_TAG_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_DIGEST_PATTERN = r"sha256:[a-f0-9]{64}"
FORBIDDEN_IMAGE_TAGS = ("latest",)
# An optional registry host with a port (registry.example.com:5000/), the path, a tag, a digest.
_IMAGE = re.compile(rf"([a-z0-9.-]+:[0-9]+/)?[a-z0-9][a-z0-9._/-]*(:{IMAGE_TAG_PATTERN})?(@{IMAGE_DIGEST_PATTERN})?")


def _pinned_image(value: str) -> str:
    match = _IMAGE.fullmatch(value)
    has_tag = ":" in value.split("/")[-1].split("@")[0]
    if not match or not (has_tag or "@sha256:" in value):
        raise ValueError(f"{value!r} is not a pinned image: give a tag or a digest, e.g. 'vllm/vllm-openai:v0.11.0'")
    tag = value.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    if tag in FORBIDDEN_IMAGE_TAGS:
        raise ValueError(f"{value!r} uses the {tag!r} tag: pin a release tag or a sha256 digest")
    return value


PinnedImage = Annotated[str, AfterValidator(_pinned_image)]


def _refuse_retired_keys(data: Any, retired: Mapping[str, str]) -> Any:
    """A model's raw input, refused when it holds a key the platform no longer reads, with why
    (a `before` validator: an unknown key would only list the allowed ones)."""
    if isinstance(data, dict):
        for key, why in retired.items():
            if key in data:
                raise ValueError(f"'{key}' is no longer read: {why}")
    return data


# Counts, sizes and seconds end up in int32 fields (replicas, node group sizes, HPA and pod
# seconds): the API server refuses anything larger than this.
INT32_MAX = 2**31 - 1
PositiveInt = Annotated[int, Field(gt=0, le=INT32_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX)]
Percent = Annotated[int, Field(ge=0, le=100)]
