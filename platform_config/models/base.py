"""The base of every config model (`ConfigModel`: camelCase keys, unknown keys refused, strict types, the docstring
under a field its description) and the field types the blocks share: names, quantities, durations, pinned images,
bounded integers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from ..quantity import QUANTITY_HELP, QUANTITY_PATTERN, parse_quantity

PROJECT = "inference-platform"


class ConfigModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        # The docstring under a field is its description, read by the config reference's generator
        # (platform_config/reference.py `described_models`) rather than here: pydantic's
        # `use_attribute_docstrings` parses every model's source at each import, 70 ms of every preview's start.
        # Stack files use the camelCase keys only (the loader validates by alias alone); Python
        # code may build models by field name.
        validate_by_name=True,
        validate_by_alias=True,
    )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy whose lookups derived from its fields (a `cached_property`, kept in the instance's `__dict__`, which
        pydantic copies whole) are found again from its own fields: the registry's resolution copies the config with
        new models, and would otherwise read the original's."""
        copied = super().model_copy(update=update, deep=deep)
        fields = type(self).model_fields
        for derived in [name for name in copied.__dict__ if name not in fields]:
            del copied.__dict__[derived]
        return copied


# Every pattern of a field type is applied with `fullmatch`: Python's `$` also matches before a trailing
# newline, so `re.match(r"^...$")` would let "qwen\n" through to an object name. (Field(pattern=)
# runs in pydantic-core's Rust regex engine, where `$` is the end of the text only.)

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A DNS-1123 subdomain as the API server validates one (kubernetes/apimachinery
# pkg/util/validation/validation.go at v0.33.9: IsDNS1123Subdomain): Secret names, label key prefixes.
_DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class AllowList:
    """What a config string may be: the whole of it matches `pattern` (never a prefix, nor a match that stops before
    a trailing newline), and it is at most `max_length` characters long. Every string of the config has one (or a
    literal's choices, or a `Field(pattern=...)`): ASCII and bounded, so nothing a shell, an IAM policy, a header, the
    gateway's Lua filter, PromQL, a label or an annotation reads specially can come from config unchecked
    (tests/test_config_strings.py walks the models and proves each pattern ASCII and bounded)."""

    pattern: re.Pattern[str]
    what_it_is_not: str
    max_length: int | None = None

    def __call__(self, value: str) -> str:
        if (self.max_length is not None and len(value) > self.max_length) or not self.pattern.fullmatch(value):
            raise ValueError(f"{shown(value)} {self.what_it_is_not}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The stack-file schema carries the pattern and the bound too, so editors flag a bad value before a preview
        does: the pattern where JSON Schema's regular expressions (ECMA-262) read it as Python does."""
        json_schema = handler.resolve_ref_schema(handler(schema))
        pattern = re.sub(r"\(\?P<\w+>", "(", self.pattern.pattern)  # a named group is written two ways: plain
        if not re.search(r"\(\?[aiLmsux]|\\[AZ]|\(\?P=", pattern):
            json_schema["pattern"] = f"^(?:{pattern})$"
        if self.max_length is not None:
            json_schema["maxLength"] = self.max_length
        return json_schema


def shown(value: str, limit: int = 100) -> str:
    """A config value as a message quotes it: whole when short, else its start and its length (a 5,000-character
    value would bury the message)."""
    return repr(value) if len(value) <= limit else f"{value[: limit // 2]!r}... ({len(value)} characters)"


def _full_match(pattern: str | re.Pattern[str], what_it_is_not: str, max_length: int | None = None) -> AllowList:
    """A value the whole of which matches `pattern`, at most `max_length` characters long (AllowList); the error
    says what the value is not and gives an example."""
    return AllowList(re.compile(pattern), what_it_is_not, max_length)


def _dns_label(max_length: int, *, letter_first: bool) -> AllowList:
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


# No Kubernetes quantity is above 2^63-1 of its unit or has more than 3 decimal places (k8s.io/apimachinery
# pkg/api/resource/quantity.go, Quantity's doc comment): 19 digits, a point, 3 decimals and a suffix fit in 32.
QUANTITY_MAX_LENGTH = 32
_QUANTITY = _full_match(QUANTITY_PATTERN, f"is not {QUANTITY_HELP}", QUANTITY_MAX_LENGTH)


def _positive_quantity(value: str) -> str:
    if parse_quantity(value) <= 0:
        raise ValueError(f"{value!r} must be more than zero: a pod with no memory or CPU request is not admitted")
    return value


Quantity = Annotated[str, _QUANTITY]
PositiveQuantity = Annotated[str, _QUANTITY, AfterValidator(_positive_quantity)]

# At most 15 digits: anything longer is beyond the protobuf Duration maximum anyway.
_DURATION = re.compile(r"^([0-9]{1,15})(ms|s|m|h)$")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
# google.protobuf.Duration's range (protobuf src/google/protobuf/duration.proto: "+315,576,000,000
# seconds"); Envoy and Istio refuse a longer duration.
MAX_DURATION_SECONDS = 315_576_000_000


_NOT_A_DURATION = "is not a duration: use a whole number with ms, s, m or h, e.g. '5s' or '5m'"


def duration_seconds(value: str) -> float:
    match = _DURATION.fullmatch(value)
    if not match:
        raise ValueError(f"{value!r} {_NOT_A_DURATION}")
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
Duration = Annotated[str, _full_match(_DURATION, _NOT_A_DURATION), AfterValidator(_duration), _DURATION_SCHEMA]


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


# distribution/reference (reference.go, NameTotalLengthMax) holds a repository name to 255 characters; with a tag
# (128) and a digest (71) a reference is under 512.
IMAGE_REFERENCE_MAX_LENGTH = 512


_NOT_PINNED = "is not a pinned image: give a tag or a digest, e.g. 'vllm/vllm-openai:v0.33.0'"


def image_tag(reference: str) -> str:
    """An image reference's tag: after the `:` of its last path segment, before any digest ('' without one; the
    `:` of a registry's port is in an earlier segment)."""
    return reference.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]


def _pinned_image(value: str) -> str:
    match = _IMAGE.fullmatch(value)
    tag = image_tag(value)
    if not match or not (tag or "@sha256:" in value):
        raise ValueError(f"{value!r} {_NOT_PINNED}")
    if tag in FORBIDDEN_IMAGE_TAGS:
        raise ValueError(f"{value!r} uses the {tag!r} tag: pin a release tag or a sha256 digest")
    return value


PinnedImage = Annotated[
    str,
    _full_match(_IMAGE, _NOT_PINNED, IMAGE_REFERENCE_MAX_LENGTH),
    AfterValidator(_pinned_image),
]


def _refuse_retired_keys(data: Any, retired: Mapping[str, str]) -> Any:
    """A model's raw input, refused when it holds a key the platform no longer reads, with why
    (a `before` validator: an unknown key would only list the allowed ones)."""
    if isinstance(data, dict):
        for key, why in retired.items():
            if key in data:
                raise ValueError(f"'{key}' is no longer read: {why}")
    return data


# The form of an EC2 instance type (`p5.48xlarge`, `g6e.12xlarge`, `m6i.2xlarge`), before a catalog says it knows it.
INSTANCE_TYPE_FORM = r"[a-z][a-z0-9-]{0,15}\.[a-z0-9]{1,16}"


# A MIG profile as NVIDIA names it (`<compute slices>g.<memory>gb`, e.g. `1g.10gb`, and the media extension's
# `+me`): it becomes part of an extended resource name (`nvidia.com/mig-1g.10gb`), quota keys and node labels. The
# catalog (platform_config/gpu_catalog.py) says which a GPU has.
MigProfileName = Annotated[
    str, _full_match(r"[0-9]{1,2}g\.[0-9]{1,4}gb(\+me)?", "is not a MIG profile such as '1g.10gb' or '3g.40gb'", 16)
]


# Counts, sizes and seconds end up in int32 fields (replicas, node group sizes, HPA and pod
# seconds): the API server refuses anything larger than this.
INT32_MAX = 2**31 - 1
PositiveInt = Annotated[int, Field(gt=0, le=INT32_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX)]
Percent = Annotated[int, Field(ge=0, le=100)]
