"""Credentials in clear: in environment values, command lines, whole Secrets taken as environment, and Helm values."""

from __future__ import annotations

import re
from typing import Any, Mapping

from .kube import (
    FACTS,
    HELM_RELEASE,
    Report,
    config,
    every_container,
    get,
    is_list,
    namespace_of,
    pod_template,
    workload_containers,
)

# Whole name parts only: HF_TOKEN and DB_PASSWORD are secrets, MAX_TOKENS and TOKENIZERS_* are not.
SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)($|_)", re.IGNORECASE
)


def no_plain_secret_env(args: Any, report_violation: Report) -> None:
    for container in workload_containers(args.resource_type, args.props):
        for env in get(container, "env", default=[]):
            if SECRET_NAME.search(get(env, "name", default="")) and get(env, "value") not in (None, ""):
                report_violation(
                    f"container '{get(container, 'name', default='?')}' sets {env['name']} as a plain value: read it from a "
                    "Secret (valueFrom.secretKeyRef)"
                )


# A command-line flag or `key=value` whose name says it carries a credential.
_SECRET_FLAG = re.compile(r"^-{1,2}([A-Za-z0-9][A-Za-z0-9_-]*)$")


_SECRET_ASSIGNMENT = re.compile(r"(?:^|[\s?&;])-{0,2}([A-Za-z][A-Za-z0-9_-]*)=(\S+)")


# Kubernetes expands $(VAR) from the container's env: a reference to a secret, not the secret.
_ENV_REFERENCE = re.compile(r"^\$\([A-Za-z_][A-Za-z0-9_]*\)$")


# What a credential looks like in clear, by format, in the program's order so that both name a
# value alike (platform_config/credentials.py).
_CREDENTIALS = [(str(name), re.compile(pattern)) for name, pattern in FACTS["credentialFormats"]]


def credential_format(text: str) -> str | None:
    return next((name for name, pattern in _CREDENTIALS if pattern.search(text)), None)


def _secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_")))


def secrets_in_words(words: list[str]) -> list[str]:
    """What, in a command line, passes a credential in clear: `--api-key X`, `--hf-token=X`,
    `token=X`, or a Hugging Face token itself. Names only: the values are never repeated."""
    found = []
    for index, word in enumerate(words):
        flag = _SECRET_FLAG.match(word)
        if flag and _secret_name(flag.group(1)) and index + 1 < len(words):
            following = words[index + 1]
            if not following.startswith("-") and not _ENV_REFERENCE.match(following):
                found.append(word)
        for name, value in _SECRET_ASSIGNMENT.findall(word):
            if _secret_name(name) and not _ENV_REFERENCE.match(value):
                found.append(name + "=")
        credential = credential_format(word)
        if credential is not None:
            found.append(credential)
    return found


def no_secret_args(args: Any, report_violation: Report) -> None:
    for container in workload_containers(args.resource_type, args.props):
        items = [str(item) for part in ("command", "args") for item in get(container, part, default=[])]
        words = [word for item in items for word in item.split()]
        found = set(secrets_in_words(words))
        # A format with spaces in it (a private key block) spans words.
        spanning = credential_format("\n".join(items))
        if spanning is not None and not found:
            found.add(spanning)
        for what in sorted(found):
            report_violation(
                f"container '{get(container, 'name', default='?')}' passes a credential ({what}) in its command line, where "
                "anyone who can read the pod sees it: read it from a Secret (env valueFrom.secretKeyRef) and pass $(VAR)"
            )


def no_secret_env_from(args: Any, report_violation: Report) -> None:
    """envFrom a Secret hands every key of it to the container, whatever the Secret later holds."""
    template = pod_template(args.resource_type, args.props)
    if template is None or namespace_of(args.props) in config(args).get("allowedNamespaces", []):
        return
    for container in every_container(get(template, "spec", default={})):
        for source in get(container, "envFrom", default=[]):
            secret = get(source, "secretRef", "name")
            if secret is not None:
                report_violation(
                    f"container '{get(container, 'name', default='?')}' takes every key of Secret '{secret}' as environment "
                    "(envFrom): name the keys it needs with env valueFrom.secretKeyRef"
                )


# Keys that name where a secret is, not the secret: existingSecret, secretName, tokenFile, and
# the key inside a Secret (passwordKey; but apiKey and secretKey are credentials).
_REFERENCE_PARTS = {"EXISTING", "NAME", "REF", "FILE", "PATH", "MOUNT", "ENABLED", "CREATE", "ANNOTATIONS"}


_REFERENCE_SUFFIX = re.compile(r"(PASSWORD|PASSWD|TOKEN|CREDENTIALS?)_KEY$")


def _names_a_secret(key: str) -> bool:
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).upper().replace("-", "_")
    return _secret_name(key) and not set(words.split("_")) & _REFERENCE_PARTS and not _REFERENCE_SUFFIX.search(words)


def _plain_secrets(value: Any, path: str) -> list[str]:
    found = []
    if isinstance(value, Mapping):
        # An env entry in values: {name: HF_TOKEN, value: ...}
        if isinstance(value.get("name"), str) and isinstance(value.get("value"), str) and value["value"]:
            if _secret_name(value["name"]) and not _ENV_REFERENCE.match(value["value"]):
                found.append(f"{path}[name={value['name']}].value")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(item, str) and item and _names_a_secret(str(key)):
                found.append(where)
            else:
                found += _plain_secrets(item, where)
    elif is_list(value):
        for index, item in enumerate(value):
            found += _plain_secrets(item, f"{path}[{index}]")
    elif isinstance(value, str) and credential_format(value) is not None:
        found.append(path)
    return found


def no_secrets_in_helm_values(args: Any, report_violation: Report) -> None:
    """Helm values end up in the release's Secret and in the Pulumi state in clear: a chart is
    given the name of a Secret that holds the credential (existingSecret and the like)."""
    if args.resource_type != HELM_RELEASE:
        return
    for where in _plain_secrets(get(args.props, "values", default={}), ""):
        report_violation(
            f"Helm values {where} holds a secret-looking value in clear: give the chart the name of a Secret that holds it"
        )
