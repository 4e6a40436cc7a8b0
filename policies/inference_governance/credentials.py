"""Credentials in clear: in environment values, command lines, whole Secrets taken as environment, Helm values and
ConfigMaps. By name (`HF_TOKEN`, `--api-key`, `adminPassword`) and by format (the token formats the program's
platform_config/credentials.py lists, read from the generated facts: one list for the program and the pack)."""

from __future__ import annotations

import base64
import binascii
import re
from re import _constants as _regex  # type: ignore[attr-defined]
from re import _parser as _regex_parser
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
)

# Whole name parts only: HF_TOKEN and DB_PASSWORD are secrets, MAX_TOKENS and TOKENIZERS_* are not.
SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)($|_)", re.IGNORECASE
)


def _pod_containers(args: Any) -> list[Mapping[str, Any]]:
    """Every container of a workload's pods, ephemeral ones included: a credential in any of them is in the pod's spec."""
    template = pod_template(args.resource_type, args.props)
    return [] if template is None else list(every_container(get(template, "spec", default={})))


def no_plain_secret_env(args: Any, report_violation: Report) -> None:
    """An environment variable named like a secret, or whose value is a credential of a known format, set as a plain
    value: anyone who can read the pod reads it. Named by variable and format, never echoed."""
    for container in _pod_containers(args):
        name = get(container, "name", default="?")
        for env in get(container, "env", default=[]):
            variable, value = str(get(env, "name", default="")), get(env, "value")
            if not isinstance(value, str) or not value:
                continue
            if SECRET_NAME.search(variable):
                report_violation(
                    f"container '{name}' sets {variable} as a plain value: read it from a Secret (valueFrom.secretKeyRef)"
                )
            elif (found := credential_format(value)) is not None:
                report_violation(
                    f"container '{name}' sets {variable} to a {found} in clear: read it from a Secret (valueFrom.secretKeyRef)"
                )


# A command-line flag or `key=value` whose name says it carries a credential.
_SECRET_FLAG = re.compile(r"^-{1,2}([A-Za-z0-9][A-Za-z0-9_-]*)$")


_SECRET_ASSIGNMENT = re.compile(r"(?:^|[\s?&;])-{0,2}([A-Za-z][A-Za-z0-9_-]*)=(\S+)")


# Kubernetes expands $(VAR) from the container's env: a reference to a secret, not the secret.
_ENV_REFERENCE = re.compile(r"^\$\([A-Za-z_][A-Za-z0-9_]*\)$")


def leading_literals(pattern: str) -> tuple[str, ...]:
    """Texts one of which every match of `pattern` begins with (after a leading `\\b` or `^`, which match no
    character): its literal characters up to the first repeat, class of more than a few characters or group of
    alternatives, each alternative's own; () when the pattern has none or its case is ignored. A text holding none
    of them holds no match, so a search of it can be skipped: Python's `re` scans a pattern that begins with a
    word boundary at every position of the text (no literal prefix to skip to), and the dashboards' ConfigMaps are
    megabytes at scale."""
    tree = _regex_parser.parse(pattern)
    if tree.state.flags & re.IGNORECASE:
        return ()
    found = _leading(list(tree))
    return () if "" in found else tuple(sorted(found))


# Past this many texts a search for each costs more than the pattern's own scan: the texts found so far serve.
_MOST_LITERALS = 16


def _leading(items: list[Any]) -> set[str]:
    prefixes, started = {""}, False
    for op, value in items:
        if op is _regex.AT and not started:
            continue  # a boundary or an anchor: zero width
        if op is _regex.LITERAL:
            prefixes = {p + chr(value) for p in prefixes}
        elif op is _regex.IN and len(prefixes) * len(value) <= _MOST_LITERALS and all(o is _regex.LITERAL for o, _ in value):
            prefixes = {p + chr(c) for p in prefixes for _, c in value}
        elif op is _regex.SUBPATTERN and value[1] & re.IGNORECASE:
            return prefixes  # a group whose case is ignored, `(?i:...)`: its letters match either case
        elif op is _regex.SUBPATTERN or op is _regex.BRANCH:
            branches = [list(value[-1])] if op is _regex.SUBPATTERN else [list(b) for b in value[1]]
            heads = {h for branch in branches for h in _leading(branch)}
            if len(prefixes) * len(heads) > _MOST_LITERALS:
                return prefixes
            return {p + h for p in prefixes for h in heads}
        else:
            return prefixes
        started = True
    return prefixes


# What a credential looks like in clear, by format, in the program's order so that both name a
# value alike (platform_config/credentials.py), each with the texts one of which its every match begins with.
_CREDENTIALS = [(str(name), re.compile(pattern), leading_literals(pattern)) for name, pattern in FACTS["credentialFormats"]]
# Every format's texts in one pattern, searched first: most texts hold none of them, and one search in the regex engine
# says so about 7 times faster than asking each format in turn (100 models' 443,000 strings and words: 2.06 -> 0.31 s).
# None where a format has no such text (a match may then begin anywhere).
_ANY_LEADING = (
    re.compile("|".join(re.escape(literal) for _, _, literals in _CREDENTIALS for literal in sorted(literals)))
    if all(literals for _, _, literals in _CREDENTIALS)
    else None
)


def credential_format(text: str) -> str | None:
    if _ANY_LEADING is not None and _ANY_LEADING.search(text) is None:
        return None
    for name, pattern, literals in _CREDENTIALS:
        if literals and not any(literal in text for literal in literals):
            continue
        if pattern.search(text):
            return name
    return None


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
    for container in _pod_containers(args):
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


CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


def _credentials_in_text(entries: Mapping[str, Any], decode: bool) -> list[tuple[str, str]]:
    found = []
    for key, value in entries.items():
        text = str(value)
        if decode:
            try:
                text = base64.b64decode(text, validate=True).decode("utf-8", "replace")
            except (ValueError, binascii.Error):
                pass  # not base64: read as it is
        kind = credential_format(str(key)) or credential_format(text)
        if kind is not None:
            found.append((str(key) if credential_format(str(key)) is None else "a key", kind))
    return found


def no_secrets_in_config_maps(args: Any, report_violation: Report) -> None:
    """A ConfigMap is readable by whoever may read the namespace's ConfigMaps and is stored unencrypted: none of its
    keys or values (data, and binaryData decoded) may hold a credential of a known format. Named by key and format."""
    if args.resource_type != CONFIG_MAP:
        return
    entries = [*_credentials_in_text(get(args.props, "data", default={}) or {}, decode=False)]
    entries += _credentials_in_text(get(args.props, "binaryData", default={}) or {}, decode=True)
    for key, kind in entries:
        report_violation(f"ConfigMap entry {key} holds a {kind} in clear: put it in a Secret and mount or reference that instead")
