"""Read the stack's `inference-platform:*` config once, parse it, check it, or fail cleanly.

Pulumi hands a Python program its config as strings (objects and lists JSON-encoded), through
the runtime's config store or the PULUMI_CONFIG environment. Everything is read and validated
here, before a single resource is registered, so a bad stack file never half-applies. Versions named in the
MLflow model registry are resolved here too, once the config passed its checks (platform_config/registry/):
what the rest of the program reads holds only pinned sources.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Literal, Sequence, get_origin

import pulumi
from pulumi.runtime import config as runtime_config
from pydantic import ValidationError

from .checks import run_checks
from .credentials import credential_format, credentials_in
from .errors import ConfigError, ConfigIssue, issues_from_validation
from .image_lock import ImageLock, read_image_lock
from .models import HUGGING_FACE_TOKENS, PROJECT, REGISTRY_TOKEN, SECRET_KEYS, PlatformConfig
from .provider_keys import PROVIDER_NAMESPACES, provider_key_issues
from .registry import PROJECT_DIR, REGISTRY_FILE_ENV, RegistryResolution, resolve_registry


@dataclass(frozen=True)
class LoadedConfig:
    platform: PlatformConfig
    # Secret config values stay Pulumi secrets; they are never parsed into the model. Tenant
    # name -> that tenant's Hugging Face token.
    hugging_face_tokens: dict[str, pulumi.Output[str]]
    # What the stack's MLflow registry references resolved to (live, or from a recording at a preview); None when
    # no version names one. `platform` already holds the pinned sources they resolved to.
    registry: RegistryResolution | None = None
    # The AWS region the cluster's nodes run in (`cluster.eks.region`, else `aws:region`); None for a cluster reached
    # by kubeconfig, whose nodes the stack does not create. The list prices are per region (platform_config/prices.py).
    region: str | None = None
    # The digests the stack's image lock (`images.lockFile`) holds; empty without one.
    image_lock: ImageLock = ImageLock()


def _all_config_keys() -> set[str]:
    return set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())


def _scalar_string_fields() -> set[str]:
    """Top-level keys whose value is a plain string (not JSON) in the config store."""
    return {
        field.alias or name
        for name, field in PlatformConfig.model_fields.items()
        if field.annotation is str or get_origin(field.annotation) is Literal
    }


def read_raw_config() -> dict[str, Any]:
    """The project's config as JSON-like values, keyed by the camelCase top-level key."""
    prefix = f"{PROJECT}:"
    strings = _scalar_string_fields()
    raw: dict[str, Any] = {}
    for full_key in sorted(_all_config_keys()):
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix) :]
        if key in SECRET_KEYS or key == RETIRED_SECRET_KEY:  # the retired key is reported by name, unparsed
            continue
        text = runtime_config.get_config(full_key)
        if key in strings:
            raw[key] = text
            continue
        try:
            raw[key] = json.loads(text)
        except (TypeError, json.JSONDecodeError):
            raw[key] = text  # let the model report the type mismatch with the key's path
    return raw


# The one token for every tenant this key held was replaced by one token per tenant.
RETIRED_SECRET_KEY = "huggingFaceToken"
TOKEN_COMMAND = "pulumi config set --path --secret 'huggingFaceTokens.<tenant>' hf_..."


def _read_hugging_face_tokens() -> tuple[dict[str, Any], list[ConfigIssue]]:
    """Each tenant's Hugging Face token: `huggingFaceTokens` is one secret object keyed by tenant
    (`pulumi config set --path --secret 'huggingFaceTokens.team-a' ...` writes a `secure:` leaf
    under the key, and the CLI hands the program the whole object, marked secret). Returns the
    tenants' names (the keys are not secret) mapped to their token's JSON value, never printed."""
    full_key = f"{PROJECT}:{HUGGING_FACE_TOKENS}"
    text = runtime_config.get_config(full_key)
    if not text:
        return {}, []
    if not runtime_config.is_config_secret(full_key):
        return {}, [ConfigIssue((HUGGING_FACE_TOKENS,), f"must be a secret: set each tenant's token with `{TOKEN_COMMAND}`")]
    try:
        tokens = json.loads(text)
    except json.JSONDecodeError:
        tokens = None
    if not isinstance(tokens, dict):
        return {}, [ConfigIssue((HUGGING_FACE_TOKENS,), f"must map tenant names to tokens: `{TOKEN_COMMAND}`")]
    issues = [
        ConfigIssue((HUGGING_FACE_TOKENS, tenant), "must be a non-empty token string")
        for tenant, token in tokens.items()
        if not isinstance(token, str) or not token
    ]
    return tokens, issues


def _token_tenant_issues(platform: PlatformConfig, tenants: Iterable[str]) -> list[ConfigIssue]:
    known = [t.name for t in platform.tenants]
    return [
        ConfigIssue((HUGGING_FACE_TOKENS, name), f"unknown tenant {name!r}; tenants: {', '.join(known)}")
        for name in tenants
        if name not in known
    ]


def _tenant_tokens(tenants: Collection[str]) -> dict[str, pulumi.Output[str]]:
    """One secret Output per tenant, each holding only that tenant's token."""
    if not tenants:
        return {}
    tokens = pulumi.Config(PROJECT).require_secret_object(HUGGING_FACE_TOKENS)
    return {name: tokens.apply(functools.partial(_tenant_token, name)) for name in sorted(tenants)}


def _tenant_token(tenant: str, tokens: dict[str, str]) -> str:
    return tokens[tenant]


REGISTRY_TOKEN_COMMAND = "pulumi config set --secret registryToken <token>"


def _read_registry_token() -> tuple[str | None, list[ConfigIssue]]:
    """The MLflow registry's bearer token: one secret string. Used only to ask the registry, never a resource input,
    never printed."""
    full_key = f"{PROJECT}:{REGISTRY_TOKEN}"
    text = runtime_config.get_config(full_key)
    if text is None:
        return None, []
    if not runtime_config.is_config_secret(full_key):
        return None, [ConfigIssue((REGISTRY_TOKEN,), f"must be a secret: set it with `{REGISTRY_TOKEN_COMMAND}`")]
    try:
        structured = isinstance(json.loads(text), (dict, list))
    except ValueError:
        structured = False
    # It becomes an HTTP header: no spaces or line breaks.
    if structured or not text or not all(c.isprintable() and not c.isspace() for c in text):
        return None, [ConfigIssue((REGISTRY_TOKEN,), f"must be one token string without spaces: `{REGISTRY_TOKEN_COMMAND}`")]
    return text, []


def _registry_token_issues(platform: PlatformConfig, token: str | None) -> list[ConfigIssue]:
    if token is None or platform.registry.tracking_uri is not None:
        return []
    return [ConfigIssue((REGISTRY_TOKEN,), "nothing reads it: the stack has no 'registry.trackingUri'; remove it or set that")]


# Checks a caller adds to the config's own: the serving backends' rules and the peak checks,
# which need the backends' facts (components/plan.py), reported with every other problem.
ExtraCheck = Callable[[PlatformConfig], Iterable[ConfigIssue]]


def parse_platform_config(raw: dict[str, Any], extra_checks: Sequence[ExtraCheck] = ()) -> PlatformConfig:
    """Parse and check a raw config mapping; raise ConfigError naming every bad key."""
    leaked = _credentials_in_clear(raw)
    if leaked:
        # Reported alone: a validation error of the same value would echo the credential.
        raise ConfigError(leaked)
    try:
        platform = PlatformConfig.model_validate(raw, by_alias=True, by_name=False)
    except ValidationError as error:
        raise ConfigError(issues_from_validation(error, PlatformConfig)) from None
    _raise_check_issues(platform, extra_checks)
    return platform


def _credentials_in_clear(raw: dict[str, Any]) -> list[ConfigIssue]:
    """A credential anywhere but the secret keys: every other value becomes resource inputs, the
    state and the PR's report in clear (platform_config/credentials.py names the formats)."""
    plain = {key: value for key, value in raw.items() if key not in SECRET_KEYS}
    return [
        ConfigIssue(
            path,
            f"holds a {found} in clear: credentials go only in {', '.join(SECRET_KEYS)}, set with `pulumi config set --secret`",
        )
        for path, found in credentials_in(plain)
    ]


def _raise_check_issues(platform: PlatformConfig, extra_checks: Sequence[ExtraCheck]) -> None:
    issues = run_checks(platform) + [issue for check in extra_checks for issue in check(platform)]
    if issues:
        raise ConfigError(issues)


def _misplaced_secrets() -> list[ConfigIssue]:
    """Secrets only where the program keeps them secret: a `secure:` value inside a structured
    key would become plain resource inputs (and plain text in the state)."""
    prefix = f"{PROJECT}:"
    return [
        ConfigIssue(
            (key[len(prefix) :],),
            f"holds a secret, but only {', '.join(SECRET_KEYS)} may: this key's values become resource inputs in clear",
        )
        for key in sorted(_all_config_keys())
        if key.startswith(prefix) and key[len(prefix) :] not in SECRET_KEYS and runtime_config.is_config_secret(key)
    ]


# Config namespaces a stack may use: the project's own, and the providers' and the engine's.
KNOWN_NAMESPACES = (PROJECT, *PROVIDER_NAMESPACES)
# The providers' credential keys (pulumi-aws's provider config: accessKey, secretKey, token): no
# format tells a secret key from any other string, so any value in clear is refused.
PROVIDER_CREDENTIAL_KEYS = ("aws:accessKey", "aws:secretKey", "aws:token")


def _provider_credentials_in_clear() -> list[ConfigIssue]:
    """A credential in a provider's or the engine's key: the stack file is committed, so a key
    such as `kubernetes:kubeconfig` holding a token, or `aws:secretKey` not set with `--secret`,
    puts the credential in the repository in clear. Named by key, never echoed."""
    issues = []
    for key in sorted(_all_config_keys()):
        namespace = key.split(":", 1)[0]
        if namespace == PROJECT or namespace not in KNOWN_NAMESPACES or runtime_config.is_config_secret(key):
            continue
        text = runtime_config.get_config(key) or ""
        found = credential_format(text) or ("credential" if key in PROVIDER_CREDENTIAL_KEYS and text else None)
        if found is not None:
            issues.append(
                ConfigIssue(
                    (),
                    f"holds a {found} in clear: set it with `pulumi config set --secret {key}`, or leave it to the "
                    "environment (AWS_PROFILE, KUBECONFIG)",
                    foreign_key=key,
                )
            )
    return issues


def _foreign_keys() -> list[ConfigIssue]:
    """Keys in a namespace nothing reads: a misspelt project namespace (`inference-platfrom:
    models`) would otherwise drop that block silently and preview 'clean' without it."""
    issues = []
    for key in sorted(_all_config_keys()):
        namespace = key.split(":", 1)[0]
        if namespace not in KNOWN_NAMESPACES:
            issues.append(
                ConfigIssue(
                    (),
                    f"unknown config namespace {namespace!r}: nothing reads this key; namespaces read: "
                    f"{', '.join(KNOWN_NAMESPACES)} (a misspelt {PROJECT!r}?)",
                    foreign_key=key,
                )
            )
    return issues


def _region_issues(platform: PlatformConfig) -> list[ConfigIssue]:
    eks = platform.cluster.eks
    provider_region = runtime_config.get_config("aws:region")
    if eks is not None and eks.region is None and not provider_region:
        # Else the provider takes the region of whoever runs `pulumi up` (AWS_REGION, the profile): one stack file
        # would build the cluster in a different region per machine, priced by a region the preview cannot know.
        return [
            ConfigIssue(("cluster", "eks", "region"), "is not set and neither is aws:region: set one of them (equal if both)")
        ]
    if eks is None or eks.region is None or not provider_region or provider_region == eks.region:
        return []
    return [
        ConfigIssue(
            ("cluster", "eks", "region"),
            f"{eks.region!r} differs from aws:region {provider_region!r}, where the AWS resources are created; make them equal",
        )
    ]


def cluster_region(platform: PlatformConfig, provider_region: str | None) -> str | None:
    """The AWS region the stack's nodes run in: `cluster.eks.region`, else the provider's `aws:region`; None for a
    cluster reached by kubeconfig."""
    eks = platform.cluster.eks
    if eks is None:
        return None
    return eks.region or provider_region or None


def _retired_keys() -> list[ConfigIssue]:
    if not runtime_config.get_config(f"{PROJECT}:{RETIRED_SECRET_KEY}"):
        return []
    return [
        ConfigIssue(
            (RETIRED_SECRET_KEY,),
            f"is no longer read: each tenant has its own token in {HUGGING_FACE_TOKENS} (`{TOKEN_COMMAND}`); remove this key",
        )
    ]


def load_config(extra_checks: Sequence[ExtraCheck] = ()) -> LoadedConfig:
    foreign = _foreign_keys()
    if foreign:
        raise ConfigError(foreign)
    # Reported without parsing: a parse error would echo a secret value.
    misplaced = (
        _retired_keys()
        or _misplaced_secrets()
        or _provider_credentials_in_clear()
        or provider_key_issues(_all_config_keys(), runtime_config.get_config, runtime_config.is_config_secret)
    )
    if misplaced:
        raise ConfigError(misplaced)
    raw = read_raw_config()
    tokens, secret_issues = _read_hugging_face_tokens()
    registry_token, token_issues = _read_registry_token()
    secret_issues += token_issues
    try:
        platform = parse_platform_config(raw, extra_checks)
    except ConfigError as error:
        raise ConfigError([*secret_issues, *error.issues]) from None
    issues = (
        secret_issues
        + _token_tenant_issues(platform, tokens)
        + _registry_token_issues(platform, registry_token)
        + _region_issues(platform)
    )
    if issues:
        raise ConfigError(issues)
    # Asked only of a config that passed every check; the sources it resolves to are checked like any other (S3
    # weights need EKS, for one).
    platform, registry = resolve_registry(
        platform,
        registry_token,
        recording_file=os.environ.get(REGISTRY_FILE_ENV) or None,
        dry_run=pulumi.runtime.is_dry_run(),
    )
    if registry is not None:
        # What the registry (or its lock file) answered is read as the stack file is: a credential in a weights
        # location would reach resource inputs, the state and the report in clear.
        leaked = _credentials_in_clear(platform.model_dump(mode="json", by_alias=True))
        if leaked:
            raise ConfigError(leaked)
        _raise_check_issues(platform, extra_checks)
    return LoadedConfig(
        platform=platform,
        hugging_face_tokens=_tenant_tokens(tokens),
        registry=registry,
        region=cluster_region(platform, runtime_config.get_config("aws:region")),
        image_lock=read_image_lock(platform, PROJECT_DIR),
    )
