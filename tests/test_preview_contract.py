"""The offline preview's output contract, for every stack under stacks/."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from platform_config.chart_images import chart_images

from .helpers import ROOT, STACKS, run_preview

# The charts whose images the platform pins by the lock (platform_config/chart_images.py).
CHART_NAMES = {image.chart.chart for image in chart_images("1.33")}

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_previews_clean(previews, stack):
    run = previews[stack]
    assert run.result.returncode == 0, run.result.stdout + run.result.stderr
    assert "result: clean" in run.result.stdout
    assert run.report["status"] == "clean"
    # The policy pack ran over every resource and found nothing, mandatory or advisory, but on prod the images by
    # tag: no registry is reachable here to lock them (platform_tools lock-images), so the preview's own run reports
    # each pod's as a warning where `pulumi up` would refuse it (preview/inputs.py image_digests_offline).
    policies = run.report["policies"]
    diagnostics = policies["data"]["diagnostics"]
    by_tag = [d for d in diagnostics if d["policy"] == "image-digests"]
    assert policies["failed"] is False and [d for d in diagnostics if d not in by_tag] == []
    assert {d["level"] for d in by_tag} == ({"advisory"} if stack == "prod" else set())
    assert {d["urn"] for d in by_tag} == ({r["urn"] for r in run.resources if _runs_pods(r)} if stack == "prod" else set())
    assert all("by tag in production" in d["message"] for d in by_tag)
    warned = [w for w in policies["data"]["warnings"] if w.startswith("policy image-digests ")]
    assert [w.split(": ", 1)[0] for w in warned] == (
        ["policy image-digests is mandatory in the pack but advisory in this preview alone"] if stack == "prod" else []
    )
    assert policies["data"]["analyzedResources"] == sum(
        1 for r in run.resources if r["custom"] and not r["type"].startswith("pulumi:providers:")
    )


def _runs_pods(resource: dict) -> bool:
    """A resource that declares a pod template or is a pod, or a Helm release of a chart whose images the platform
    knows: what the pack's image rules read."""
    spec = resource["inputs"].get("spec") or {}
    if resource["type"] == "kubernetes:helm.sh/v3:Release":
        return resource["inputs"]["chart"].rsplit("/", 1)[-1] in CHART_NAMES
    return resource["custom"] and (resource["type"].endswith(":Pod") or "template" in spec or "jobTemplate" in spec)


@pytest.mark.parametrize("stack", STACKS)
def test_resources_json_contract(previews, stack):
    resources = previews[stack].resources
    assert isinstance(resources, list) and resources
    urns = {r["urn"] for r in resources}
    for resource in resources:
        assert set(resource) == {"type", "name", "urn", "parent", "custom", "inputs"}
        assert isinstance(resource["custom"], bool)
        assert resource["parent"] is None or resource["parent"] in urns
        assert resource["urn"].endswith(f"::{resource['name']}")
        assert resource["urn"].split("::")[2].split("$")[-1] == resource["type"]
    roots = [r for r in resources if r["parent"] is None]
    assert [r["type"] for r in roots] == ["pulumi:pulumi:Stack"]
    # Components are recorded too, not only custom resources.
    types = {r["type"] for r in resources if not r["custom"]}
    assert {"inference-platform:platform:InferencePlatform", "inference-platform:tenant:Tenant"} <= types


@pytest.mark.parametrize("stack", STACKS)
def test_inputs_are_camel_case_as_the_provider_receives_them(previews, stack):
    quotas = previews[stack].of_type("kubernetes:core/v1:ResourceQuota")
    assert quotas
    for quota in quotas:
        assert quota["inputs"]["apiVersion"] == "v1" and quota["inputs"]["kind"] == "ResourceQuota"
        assert "scopeSelector" in quota["inputs"]["spec"] or "hard" in quota["inputs"]["spec"]


@pytest.mark.parametrize("stack", STACKS)
def test_one_manifest_per_kubernetes_object(previews, stack):
    run = previews[stack]
    objects = [r for r in run.resources if r["custom"] and r["type"].startswith("kubernetes:") and "helm.sh" not in r["type"]]
    files = sorted((run.out / "manifests").rglob("*.yaml"))
    assert len(files) == len(objects)
    for path in files:
        manifest = yaml.safe_load(path.read_text())
        assert list(manifest)[:3] == ["apiVersion", "kind", "metadata"]
        assert manifest["metadata"]["name"]
        # Exactly what the API server receives: no Pulumi-only fields, whole numbers as integers.
        assert "__inputs" not in json.dumps(manifest)
        assert not [v for v in _scalars(manifest) if isinstance(v, float) and v.is_integer()], path


def _scalars(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _scalars(item)
    elif isinstance(value, list):
        for item in value:
            yield from _scalars(item)
    else:
        yield value


@pytest.mark.parametrize("stack", STACKS)
def test_report_files_and_terminal_summary(previews, stack):
    run = previews[stack]
    report = run.report
    assert report["stack"] == stack and report["project"] == "inference-platform"
    counts = report["counts"]
    assert counts["resources"] == len(run.resources)
    assert sum(report["byKind"].values()) == counts["custom"]
    assert {row["type"] for row in report["byComponent"]} >= {"inference-platform:tenant:Tenant"}
    markdown = (run.out / "report.md").read_text()
    assert markdown.startswith(f"# Offline preview: `{stack}`") and "## Resources by kind" in markdown
    # Nothing of the machine that ran it: the report goes into pull requests.
    assert str(ROOT) not in markdown and str(ROOT.parent) + "/" not in markdown
    # The terminal shows the component tree and the counts.
    assert "platform (inference-platform:platform:InferencePlatform)" in run.result.stdout
    assert f"{counts['resources']} resources:" in run.result.stdout


def test_secrets_stay_marked_secret(previews):
    prod = previews["prod"]
    outputs = prod.report["stackOutputs"]
    # The EKS kubeconfig is a secret output: shown as [secret], like the CLI does.
    assert outputs["kubeconfig"] == "[secret]"
    assert "get-token" not in (prod.out / "report.json").read_text()


def test_json_mode_prints_the_report(tmp_path):
    result = run_preview("--stack", "dev", "--out", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads((tmp_path / "report.json").read_text())


def test_progress_line_per_stage(tmp_path):
    import subprocess
    import sys

    from .helpers import ROOT

    result = subprocess.run(
        [sys.executable, "-m", "preview", "--stack", "dev", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    stages = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert stages[0].startswith("[1/") and "reading stack config" in stages[0]
    assert len(stages) == len(json.loads((tmp_path / "report.json").read_text())["stages"])


def test_unknown_stack_is_a_clear_error(tmp_path):
    result = run_preview("--stack", "nope", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "no stack file" in result.stderr and "dev, prod, staging" in result.stderr
    assert "Traceback" not in result.stderr


def test_baseline_shows_what_a_canary_promotion_changes(tmp_path, previews, prod_raw):
    from .helpers import write_stack

    extra = {"aws:region": "us-east-1"}
    # 10 -> 100 skips the steps between: the pack (canary-weight-steps, against the baseline's
    # release) lets it through with a reason only.
    prod_raw["models"][1]["release"]["canaryWeight"] = 100
    prod_raw["models"][1]["release"]["stepOverride"] = {"reason": "a test that promotes at once"}
    promote = write_stack(tmp_path, prod_raw, extra)
    result = run_preview(
        "--stack",
        "prod",
        "--config-file",
        str(promote),
        "--baseline",
        str(previews["prod"].out),
        "--out",
        str(tmp_path / "promote"),
    )
    assert result.returncode == 0, result.stderr
    changes = json.loads((tmp_path / "promote" / "report.json").read_text())["changes"]["data"]
    changed = {c["urn"].rsplit("::", 1)[1]: c["paths"] for c in changes["changed"]}
    # Finding 15: a weight change touches routes only, never a version's pod template (under
    # Knative that would be a new revision and a cold start of every replica of both versions).
    assert set(changed) == {"llama-8b-route-virtual-service"}
    assert changes["added"] == [] and changes["removed"] == []
    assert "~ kubernetes:networking.istio.io/v1:VirtualService llama-8b-route-virtual-service" in result.stdout

    # Then drop the old version: its server goes away.
    prod_raw["models"][1]["release"] = {"stable": "v2"}
    prod_raw["models"][1]["versions"] = prod_raw["models"][1]["versions"][1:]
    drop = tmp_path / "drop"
    drop.mkdir()
    result = run_preview(
        "--stack",
        "prod",
        "--config-file",
        str(write_stack(drop, prod_raw, extra)),
        "--baseline",
        str(tmp_path / "promote"),
        "--out",
        str(tmp_path / "dropped"),
    )
    removed = {
        c["urn"].rsplit("::", 1)[1]
        for c in json.loads((tmp_path / "dropped" / "report.json").read_text())["changes"]["data"]["removed"]
    }
    assert {"llama-8b-v1", "llama-8b-v1-knative-service", "llama-8b-v1-pod-monitor"} <= removed


def test_bad_policy_config_is_an_input_error(tmp_path):
    config = tmp_path / "policy.json"
    for content, message in (
        ('{"no-such-policy": "mandatory"}', "names no policy of this pack: no-such-policy"),
        ('{"all": "sometimes"}', "unknown enforcement level 'sometimes'"),
        ("not json", "cannot read the policy config"),
    ):
        config.write_text(content)
        result = run_preview("--stack", "dev", "--out", str(tmp_path / "out"), "--policy-config", str(config))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr


def test_all_sets_every_policy_level(tmp_path):
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"all": "advisory", "inference-graceful-drain": {"minTerminationGracePeriodSeconds": 900}}))
    result = run_preview("--stack", "staging", "--out", str(tmp_path / "out"), "--policy-config", str(config))
    assert result.returncode == 0 and "ADVISORY inference-graceful-drain" in result.stdout


def test_two_resources_declaring_one_object_fail_the_render(tmp_path):
    from preview.engine import RecordedResource
    from preview.render import DuplicateObjectError, write_outputs

    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "n"}}
    twins = [
        RecordedResource(
            type="kubernetes:core/v1:ConfigMap",
            name=name,
            urn=f"urn:pulumi:s::p::kubernetes:core/v1:ConfigMap::{name}",
            parent=None,
            custom=True,
            provider=None,
            inputs=obj,
        )
        for name in ("a", "b")
    ]
    with pytest.raises(DuplicateObjectError, match="n/ConfigMap.core.x"):
        write_outputs(tmp_path, twins)


def test_secure_values_become_placeholders_that_stay_secret(tmp_path, prod_raw):
    from .helpers import write_stack

    ciphertext = "AAABAGNpcGhlcnRleHQtdGhhdC1tdXN0LW5ldmVyLWxlYWs="
    stack = write_stack(
        tmp_path,
        prod_raw,
        {
            "aws:region": "us-east-1",
            "inference-platform:huggingFaceTokens": {"serving": {"secure": ciphertext}, "team-a": {"secure": ciphertext}},
        },
    )
    out = tmp_path / "out"
    result = run_preview("--stack", "prod", "--config-file", str(stack), "--out", str(out))
    assert result.returncode == 0, result.stderr
    secrets = [r for r in json.loads((out / "resources.json").read_text()) if r["type"] == "kubernetes:core/v1:Secret"]
    # Each tenant's own token, only where it has one (team-b has none), for its weight mirror Jobs.
    assert {s["name"] for s in secrets} == {"weight-mirror-serving-huggingface-token", "weight-mirror-team-a-huggingface-token"}
    for secret in secrets:
        assert secret["inputs"]["stringData"] == {
            "secret": True,
            "value": {"token": "[secret:inference-platform:huggingFaceTokens]"},
        }
    manifest = yaml.safe_load((out / "manifests" / "model-weights" / "Secret.core.huggingface-token-serving.yaml").read_text())
    assert manifest["stringData"] == {"token": "[secret:inference-platform:huggingFaceTokens]"}
    # Every file, the latency plot's PNG included.
    everything = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert ciphertext.encode() not in everything


def test_a_broken_policy_pack_is_a_crash_not_a_finding(tmp_path):
    from .helpers import ROOT

    pack = tmp_path / "broken-pack"
    pack.mkdir()
    (pack / "PulumiPolicy.yaml").write_text("runtime:\n  name: python\n  options:\n    virtualenv: venv\n")
    (pack / "venv").symlink_to(ROOT / "policies" / "venv")
    (pack / "__main__.py").write_text("raise RuntimeError('this pack is broken')\n")
    result = run_preview("--stack", "dev", "--out", str(tmp_path / "out"), "--policy-pack", str(pack))
    assert result.returncode == 3, result.stderr
    assert "the policy pack failed" in result.stderr and "this pack is broken" in result.stderr


def test_a_pack_from_before_the_previews_own_policies_still_runs(tmp_path):
    """A pull request that adds serving-performance or image-digests is previewed with the default branch's pack,
    which has neither: the preview's own entries for them (serving-performance disabled, image-digests advisory for a
    stack without an image lock) are not sent, and the pack's other policies run."""
    import re
    import shutil

    pack = tmp_path / "older-pack"
    shutil.copytree(ROOT / "policies", pack, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    (pack / "venv").symlink_to(ROOT / "policies" / "venv")
    declared = pack / "inference_governance" / "pack.py"
    newer = declared.read_text()
    older = newer
    for name in ("serving-performance", "image-digests"):
        policy = rf"    ResourceValidationPolicy\(\n        name=\"{name}\",.*?\n    \),\n"
        assert re.search(policy, older, flags=re.S), name
        older = re.sub(policy, "", older, flags=re.S)
    declared.write_text(older)
    out = tmp_path / "out"
    result = run_preview("--stack", "dev", "--out", str(out), "--policy-pack", str(pack))
    assert result.returncode == 0, result.stderr
    policies = {p["name"] for p in json.loads((out / "report.json").read_text())["policies"]["data"]["policies"]}
    assert not {"serving-performance", "image-digests"} & policies and "gpu-quota-and-priority" in policies


def test_closing_a_policy_session_early_stops_the_pack(tmp_path):
    """The program failed before the stack could be analyzed: nothing may be left running."""
    from preview.policy_runner import PolicyPack
    from preview.policy_session import PolicySession
    from preview.stack_config import StackConfig

    from .helpers import ROOT

    pack = PolicyPack(ROOT / "policies", {}, "inference-platform", "dev")
    session = PolicySession(pack, ROOT, StackConfig("inference-platform", "dev"))
    session.close(timeout=30)
    assert pack.process.poll() is not None
    assert not session._thread.is_alive()


def test_connecting_to_the_pack_leaves_no_thread_that_a_close_would_break():
    """grpc's channel_ready_future left a thread polling the channel's state, which printed a traceback on stderr when
    the channel was closed under it: a preview stopped by a config error while its session connected (a clean clone's
    run of tests/test_lora_adapter_config.py caught it). Connecting now waits on a first call instead, and a close
    during it fails that call."""
    import threading

    from preview.policy_runner import PolicyPack

    from .helpers import ROOT

    pack = PolicyPack(ROOT / "policies", {}, "inference-platform", "dev")
    try:
        before = set(threading.enumerate())
        pack.connect()
        # No thread started by connecting is left; one of an earlier test's may have ended meanwhile (a gRPC server's,
        # stopped without waiting for its threads: a clean clone's run caught the set equality failing so).
        assert set(threading.enumerate()) <= before
    finally:
        pack.close()


def _write_verdict(out) -> None:
    """What a previous clean run left in the output folder."""
    out.mkdir(parents=True)
    (out / "report.json").write_text(json.dumps({"status": "clean"}))
    (out / "report.md").write_text("result: clean\n")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--stack", "test", "--config-file", "{stack}"], "holds a list"),
        (["--stack", "no/such/stack"], "is not a stack name"),
        (["--stack", "dev", "--policy-config", "{stack}"], "cannot read the policy config"),
    ],
)
def test_a_refused_run_leaves_no_previous_verdict_only_its_error(tmp_path, capsys, arguments, message):
    """The previous verdict goes and nothing is written; with --report-errors the refusal's own report takes its
    place (a pull request gets a comment saying why), the error printed and nothing previewed; a stack name that is
    not one leaves nothing even then."""
    from preview.cli import main

    out = tmp_path / "out"
    _write_verdict(out)
    stack = tmp_path / "Pulumi.test.yaml"
    stack.write_text("- not a mapping\n")
    argv = [argument.format(stack=stack) for argument in arguments]
    assert main(["--quiet", *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == []
    # Asked to (pull-request CI), it writes the error as the report.
    assert main(["--quiet", *argv, "--out", str(out), "--report-errors"]) == 2
    error = capsys.readouterr().err
    assert message in error
    if "not a stack name" in message:
        assert sorted(p.name for p in out.iterdir()) == []
        return
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "config-error" and message in report["error"]
    markdown = (out / "report.md").read_text()
    assert "**Result: config error**" in markdown and report["error"] in markdown
    # The terminal names the file as it was given; the report (a pull request's comment) never by the machine's
    # absolute path, but relative to the project.
    shown = os.path.relpath(stack, ROOT)
    assert str(stack) in error and shown in report["error"]
    assert str(stack) not in report["error"].replace(shown, "") + markdown.replace(shown, "")
    assert error.strip() == f"error: {report['error']}".replace(shown, str(stack))


def _program_registering_twice(root) -> None:
    """A project whose program registers two components of one type and name."""
    (root / "Pulumi.yaml").write_text("name: twins\nruntime: python\nstackConfigDir: stacks\n")
    (root / "stacks").mkdir()
    (root / "stacks" / "Pulumi.test.yaml").write_text("config: {}\n")
    (root / "__main__.py").write_text(
        "import pulumi\n\n\n"
        "class Box(pulumi.ComponentResource):\n"
        "    def __init__(self, name):\n"
        "        super().__init__('twins:index:Box', name, None, None)\n"
        "        self.register_outputs({})\n\n\n"
        "Box('same')\nBox('other')\nBox('same')\n"
    )


def test_a_duplicate_urn_fails_the_evaluation_as_the_engine_does(tmp_path):
    from preview.engine import DuplicateUrnError, evaluate
    from preview.stack_config import StackConfig

    _program_registering_twice(tmp_path)
    with pytest.raises(DuplicateUrnError) as failed:
        evaluate(tmp_path, StackConfig(project="twins", stack="test"))
    assert failed.value.urns == ["urn:pulumi:test::twins::twins:index:Box::same"]
    assert (
        str(failed.value) == "Duplicate resource URN 'urn:pulumi:test::twins::twins:index:Box::same'; try giving it a unique name"
    )


def test_a_duplicate_urn_is_a_crash_and_leaves_no_verdict(tmp_path):
    from .helpers import ROOT

    project = tmp_path / "project"
    project.mkdir()
    _program_registering_twice(project)
    out = tmp_path / "out"
    _write_verdict(out)
    result = run_preview(
        "--project-dir", str(project), "--stack", "test", "--policy-pack", str(ROOT / "policies"), "--out", str(out)
    )
    assert result.returncode == 3, result.stderr
    assert "Duplicate resource URN 'urn:pulumi:test::twins::twins:index:Box::same'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (out / "report.json").exists() and not (out / "report.md").exists()
