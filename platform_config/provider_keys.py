"""The providers' and the engine's keys a stack file may set (`aws:*`, `pulumi:*`), and what each may hold.

A stack file is committed and reviewed as config, yet a provider key changes where and how the platform is
deployed: `aws:endpoints` or `aws:httpsProxy` send every AWS call (and its signature) to another host,
`aws:insecure` turns off TLS checks, `aws:assumeRole` deploys under a role the file names, `aws:skip*` turn off the
provider's own checks. So these keys are an allow-list, each value checked for its form, the rest refused naming the
key and why. `kubernetes:*` keys are refused whole: the program's one Kubernetes provider is explicit (`__main__.py`:
the EKS cluster's kubeconfig, or `cluster.kubeconfig.path` and `.context`), and stack config reaches only a default
provider, which nothing here uses, so such a key would be ignored without a word.

The names are pulumi-aws's provider config as the pinned pulumi-aws 7.51.1 reads it (pulumi_aws/config/vars.py:
`region`, `profile`, `allowedAccountIds`, `forbiddenAccountIds`, `defaultTags`, `maxRetries`, `retryMode` of
`standard` or `adaptive`, `accessKey`, `secretKey`, `token`, and the refused ones below; `assumeRole` is the older
releases' name of `assumeRoles`) and the engine's `pulumi:disable-default-providers`. Values are never echoed: a
bad one may be a credential.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .errors import ConfigIssue
from .models.cluster import AWS_REGION_FORM, NOT_AN_AWS_REGION

_REGION = re.compile(AWS_REGION_FORM)
# A profile name of the AWS CLI's config file: ASCII letters, digits and `_.+=,@-`, bounded.
_PROFILE = re.compile(r"[A-Za-z0-9_.+=,@-]{1,64}")
_ACCOUNT_ID = re.compile(r"[0-9]{12}")
# AWS tag keys and values (Tagging AWS resources, "Tag naming limits"): letters, digits, spaces and `_.:/=+-@`,
# a key of 1 to 128 characters, a value of up to 256; at most 50 tags on a resource.
_TAG_KEY = re.compile(r"[A-Za-z0-9 _.:/=+@-]{1,128}")
_TAG_VALUE = re.compile(r"[A-Za-z0-9 _.:/=+@-]{0,256}")
MAX_TAGS = 50
MAX_ACCOUNT_IDS = 100
MAX_RETRIES = 25
RETRY_MODES = ("standard", "adaptive")
DEFAULT_PROVIDER_NAMES = ("aws", "kubernetes", "*")
# The namespaces of the providers' and the engine's keys; the loader refuses any other but the project's.
PROVIDER_NAMESPACES = ("aws", "kubernetes", "pulumi")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _region(text: str) -> str | None:
    return None if _REGION.fullmatch(text) else NOT_AN_AWS_REGION


def _profile(text: str) -> str | None:
    return None if _PROFILE.fullmatch(text) else "is not a profile name: 1 to 64 ASCII letters, digits or '_.+=,@-'"


def _account_ids(text: str) -> str | None:
    value = _json(text)
    if (
        isinstance(value, list)
        and 0 < len(value) <= MAX_ACCOUNT_IDS
        and all(isinstance(v, str) and _ACCOUNT_ID.fullmatch(v) for v in value)
    ):
        return None
    return f"must be a list of 1 to {MAX_ACCOUNT_IDS} AWS account IDs of 12 digits, each quoted"


def _default_tags(text: str) -> str | None:
    value = _json(text)
    tags = value.get("tags") if isinstance(value, dict) and set(value) == {"tags"} else None
    if (
        isinstance(tags, dict)
        and len(tags) <= MAX_TAGS
        and all(_TAG_KEY.fullmatch(k) and isinstance(v, str) and _TAG_VALUE.fullmatch(v) for k, v in tags.items())
    ):
        return None
    return (
        f"must be {{tags: {{<key>: <value>}}}} with at most {MAX_TAGS} tags, keys of 1 to 128 and values of up to 256 "
        "ASCII letters, digits, spaces or '_.:/=+@-'"
    )


def _max_retries(text: str) -> str | None:
    return None if text.isdigit() and int(text) <= MAX_RETRIES else f"must be a whole number from 0 to {MAX_RETRIES}"


def _retry_mode(text: str) -> str | None:
    return None if text in RETRY_MODES else f"must be one of {', '.join(RETRY_MODES)}"


def _secret_only(text: str) -> str | None:
    # In clear it was refused before (loader._provider_credentials_in_clear); set as a secret, any value is the
    # provider's to judge.
    return None


def _default_providers(text: str) -> str | None:
    value = _json(text)
    if isinstance(value, list) and value and all(v in DEFAULT_PROVIDER_NAMES for v in value):
        return None
    return f"must be a list of {', '.join(DEFAULT_PROVIDER_NAMES)}"


@dataclass(frozen=True)
class ProviderKey:
    what: str
    check: Callable[[str], str | None]


# Every provider or engine key a stack file may set: what it is, and the check of its value.
ALLOWED: dict[str, ProviderKey] = {
    "aws:region": ProviderKey("the AWS region the AWS resources are created in", _region),
    "aws:profile": ProviderKey("the AWS CLI profile the AWS provider takes its credentials from", _profile),
    "aws:allowedAccountIds": ProviderKey("the only AWS accounts the stack may deploy into", _account_ids),
    "aws:forbiddenAccountIds": ProviderKey("AWS accounts the stack must never deploy into", _account_ids),
    "aws:defaultTags": ProviderKey("tags the AWS provider adds to every AWS resource", _default_tags),
    "aws:maxRetries": ProviderKey("how often the AWS provider retries a throttled call", _max_retries),
    "aws:retryMode": ProviderKey("how the AWS provider spaces its retries", _retry_mode),
    "aws:accessKey": ProviderKey("an AWS access key ID, only as a Pulumi secret", _secret_only),
    "aws:secretKey": ProviderKey("an AWS secret access key, only as a Pulumi secret", _secret_only),
    "aws:token": ProviderKey("an AWS session token, only as a Pulumi secret", _secret_only),
    "pulumi:disable-default-providers": ProviderKey(
        "providers the engine may not create by default (the program declares its own)", _default_providers
    ),
}

_ELSEWHERE = "sends the AWS API calls, and their signatures, to a host or proxy the stack file names"
# Provider keys refused with the reason (pulumi-aws's provider config); any other key gets the allow-list.
REFUSED: dict[str, str] = {
    "aws:endpoints": _ELSEWHERE,
    "aws:httpProxy": _ELSEWHERE,
    "aws:httpsProxy": _ELSEWHERE,
    "aws:noProxy": _ELSEWHERE,
    "aws:ec2MetadataServiceEndpoint": _ELSEWHERE,
    "aws:ec2MetadataServiceEndpointMode": _ELSEWHERE,
    "aws:stsRegion": _ELSEWHERE,
    "aws:customCaBundle": "trusts a certificate authority the stack file names for every AWS call",
    "aws:insecure": "turns off the TLS checks of every AWS call",
    "aws:assumeRole": "deploys under a role the stack file names: leave the identity to the environment",
    "aws:assumeRoles": "deploys under a role the stack file names: leave the identity to the environment",
    "aws:assumeRoleWithWebIdentity": "deploys under a role the stack file names: leave the identity to the environment",
    "aws:sharedConfigFiles": "reads the AWS configuration from files the stack file names",
    "aws:sharedCredentialsFiles": "reads AWS credentials from files the stack file names",
    "aws:skipCredentialsValidation": "turns off a check the AWS provider makes before it creates anything",
    "aws:skipRegionValidation": "turns off a check the AWS provider makes before it creates anything",
    "aws:skipMetadataApiCheck": "turns off a check the AWS provider makes before it creates anything",
    "aws:skipRequestingAccountId": "turns off a check the AWS provider makes before it creates anything",
    "aws:ignoreTags": "hides drift in tags, the platform's own included",
}
KUBERNETES_REFUSED = (
    "the platform's Kubernetes provider is explicit (the EKS cluster's kubeconfig, or cluster.kubeconfig.path and "
    ".context) and kubernetes:* keys reach only a default provider this program never uses; the key would be ignored"
)


def _allowed_in(namespace: str) -> str:
    return ", ".join(key for key in ALLOWED if key.startswith(f"{namespace}:"))


def provider_key_issues(
    keys: Iterable[str], value_of: Callable[[str], str | None], is_secret: Callable[[str], bool]
) -> list[ConfigIssue]:
    """Each provider or engine key the stack sets that is not allowed, or whose value is not of its form."""
    issues = []
    for key in sorted(keys):
        namespace = key.split(":", 1)[0]
        if namespace not in PROVIDER_NAMESPACES:
            continue
        if namespace == "kubernetes":
            issues.append(ConfigIssue((), f"is refused: {KUBERNETES_REFUSED}", foreign_key=key))
        elif key in REFUSED:
            issues.append(ConfigIssue((), f"is refused: it {REFUSED[key]}; allowed: {_allowed_in(namespace)}", foreign_key=key))
        elif key not in ALLOWED:
            issues.append(
                ConfigIssue(
                    (), f"is not one of the {namespace} keys this platform allows: {_allowed_in(namespace)}", foreign_key=key
                )
            )
        elif not is_secret(key):
            problem = ALLOWED[key].check(value_of(key) or "")
            if problem is not None:
                issues.append(ConfigIssue((), problem, foreign_key=key))
    return issues
