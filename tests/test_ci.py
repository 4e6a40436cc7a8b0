"""CI for users (GitHub workflows) and for this repository (.ci/run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from .helpers import ROOT, run_preview

WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def test_workflows_validate_against_the_github_workflow_schema():
    result = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "check-jsonschema"),
            "--builtin-schema",
            "vendor.github-workflows",
            str(WORKFLOWS / "preview.yml"),
            str(WORKFLOWS / "deploy.yml"),
            str(WORKFLOWS / "canary.yml"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def steps_using(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(action)]


def test_pull_request_workflow():
    flow = workflow("preview.yml")
    assert list(flow["on"]) == ["pull_request"]
    jobs = flow["jobs"]
    assert any(s.get("run") == "make test" for s in jobs["test"]["steps"])
    offline = jobs["offline-preview"]
    assert offline["strategy"]["matrix"]["stack"] == ["dev", "staging", "prod"]
    (baseline,) = [s for s in offline["steps"] if "make -C trusted preview" in s.get("run", "")]
    assert "OUT=${{ github.workspace }}/build/baseline/${{ matrix.stack }}" in baseline["run"]
    # Nothing the pull request committed under build/baseline can stand in for a baseline that failed.
    assert baseline["run"].startswith("rm -rf build/baseline &&")
    (preview,) = [s for s in offline["steps"] if "make preview" in s.get("run", "")]
    assert "STACK=${{ matrix.stack }}" in preview["run"]
    # The pull request's report shows what changed against the default branch's preview.
    assert offline["steps"].index(baseline) < offline["steps"].index(preview)
    assert "BASELINE=build/baseline/{0}" in preview["run"]
    comment = jobs["comment"]
    (post,) = steps_using(comment, "marocchino/sticky-pull-request-comment")
    assert post["with"]["path"].endswith("report.md")


def test_pull_requests_get_no_credentials_and_the_default_branchs_pack():
    text = (WORKFLOWS / "preview.yml").read_text()
    flow = workflow("preview.yml")
    # Nothing that decrypts stack secrets or reaches a cloud account or cluster.
    assert "secrets." not in text and "PULUMI_ACCESS_TOKEN" not in text
    assert flow["permissions"] == {"contents": "read"}
    jobs = flow["jobs"]
    for name, job in jobs.items():
        assert not steps_using(job, "pulumi/actions") and not steps_using(job, "aws-actions/"), name
        for checkout in steps_using(job, "actions/checkout"):
            assert checkout["with"]["persist-credentials"] is False, name
    # Only the job that runs no pull-request code may write (its comment).
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}
    assert not steps_using(jobs["comment"], "actions/checkout")
    assert all("permissions" not in job for name, job in jobs.items() if name != "comment")
    # The pack the preview runs is the default branch's checkout.
    offline = jobs["offline-preview"]
    (trusted,) = [s for s in steps_using(offline, "actions/checkout") if s["with"].get("path") == "trusted"]
    assert trusted["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    (preview,) = [s for s in offline["steps"] if "make preview" in s.get("run", "")]
    assert "POLICY_PACK=trusted/policies" in preview["run"]
    # ... and the default branch's stack file is the release a canary weight may rise one step from.
    assert "PREVIOUS_STACK_FILE=trusted/stacks/Pulumi.${{ matrix.stack }}.yaml" in preview["run"]


def test_make_preview_runs_the_pack_it_is_given_with_that_checkouts_requirements(tmp_path):
    pack = tmp_path / "trusted" / "policies"
    pack.mkdir(parents=True)
    (pack / "requirements.txt").write_text("pulumi-policy\n")
    (tmp_path / "trusted" / "constraints.txt").write_text("")
    result = subprocess.run(
        ["make", "-n", "-B", "preview", f"POLICY_PACK={pack}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"-r {pack}/requirements.txt -c {tmp_path}/trusted/constraints.txt" in result.stdout
    assert f"-m preview --stack dev --out build/preview/dev --policy-pack {pack}" in result.stdout
    assert "--registry-file" not in result.stdout and "--previous-stack-file" not in result.stdout


def test_make_preview_passes_the_previous_stack_file_and_a_registry_recording(tmp_path):
    recording = tmp_path / "Pulumi.dev.registry.json"
    result = subprocess.run(
        ["make", "-n", "-B", "preview", f"REGISTRY_FILE={recording}", "PREVIOUS_STACK_FILE=trusted/stacks/Pulumi.dev.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"--previous-stack-file trusted/stacks/Pulumi.dev.yaml --registry-file {recording}" in result.stdout


def test_the_pull_requests_preview_reads_back_what_its_baseline_asked_aiconfigurator():
    job = workflow("preview.yml")["jobs"]["offline-preview"]
    # Not in the checkout: a pull request could commit answers there for the default branch's preview to read.
    assert job["env"]["PERFORMANCE_CACHE_DIR"] == "${{ runner.temp }}/performance-cache"
    names = [s.get("name", "") for s in job["steps"]]
    assert names.index("Offline preview of the default branch (the baseline)") < next(
        i for i, n in enumerate(names) if n.startswith("Offline preview (schemas")
    )


def test_deploy_workflow_staging_before_prod_behind_reviewers():
    flow = workflow("deploy.yml")
    assert flow["on"]["push"]["branches"] == ["main"]
    jobs = flow["jobs"]
    assert jobs["dev"]["needs"] == "test" and jobs["staging"]["needs"] == "dev" and jobs["prod"]["needs"] == "staging"
    assert jobs["prod"]["environment"] == "production"
    for name in ("dev", "staging", "prod"):
        (pulumi,) = [s for s in steps_using(jobs[name], "pulumi/actions") if "with" in s]
        assert pulumi["with"]["command"] == "up" and pulumi["with"]["policyPacks"] == "policies"
        assert pulumi["with"]["stack-name"].endswith(f"/{name}")
        # The release as last deployed (the stack's canaryReleases output) is what the pack holds
        # the next canary weight to.
        steps = jobs[name]["steps"]
        (outputs,) = [s for s in steps if "pulumi stack output --json" in s.get("run", "") and "aliases" not in s["run"]]
        assert "> build/stack-outputs.json" in outputs["run"] and outputs["env"]["STACK"].endswith(f"/{name}")
        # The offline preview against them: guard rails, and the Serving performance stage's verdicts, which the
        # pack's serving-performance policy holds each server to.
        (preview,) = [s for s in steps if s.get("run", "").startswith("make preview")]
        assert preview["run"] == f"make preview STACK={name} PREVIOUS_OUTPUTS=build/stack-outputs.json"
        (previous,) = [s for s in steps if "preview.previous_releases" in s.get("run", "")]
        assert "--from-outputs build/stack-outputs.json" in previous["run"]
        assert f"--policy-config build/preview/{name}/pack-config.json > build/policy-config.json" in previous["run"]
        assert steps.index(outputs) < steps.index(preview) < steps.index(previous) < steps.index(pulumi)
        assert pulumi["with"]["policyPackConfigs"] == "build/policy-config.json"
        # Then the registry's serving aliases follow what that up deployed.
        (moved,) = [s for s in jobs[name]["steps"] if "platform_tools aliases" in s.get("run", "")]
        assert jobs[name]["steps"].index(pulumi) < jobs[name]["steps"].index(moved)
        # The outputs from before the up (the previous-releases step's) say which registered models it no longer uses.
        assert f"aliases {name} --deployed build/deployed-outputs.json --previous build/stack-outputs.json" in moved["run"]
        assert jobs[name]["steps"].index(previous) < jobs[name]["steps"].index(moved)
        assert "pulumi stack output --json" in moved["run"] and moved["env"]["STACK"].endswith(f"/{name}")


def test_canary_workflow_proposes_the_step_as_a_pull_request_and_deploys_nothing():
    flow = workflow("canary.yml")
    assert set(flow["on"]) == {"schedule", "workflow_dispatch"}
    assert flow["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "read"}
    (job,) = flow["jobs"].values()
    # The CLI is installed to read the stack's outputs, never to deploy (no `command`).
    (pulumi,) = steps_using(job, "pulumi/actions")
    assert "command" not in pulumi.get("with", {}), "the canary job never deploys"
    (outputs,) = [s for s in job["steps"] if "pulumi stack output --json" in s.get("run", "")]
    assert "> build/stack-outputs.json" in outputs["run"]
    (judge,) = [s for s in job["steps"] if "platform_tools canary" in s.get("run", "")]
    # Judged only against what runs: a merged step not yet deployed waits.
    assert '"$STACK" "$model" --write --deployed build/stack-outputs.json' in judge["run"]
    assert job["steps"].index(outputs) < job["steps"].index(judge)
    assert judge["env"]["PROMETHEUS_URL"].startswith("http://127.0.0.1")
    # The dispatch form's model is checked before use, never split or globbed as given.
    assert judge["env"]["MODEL"] == "${{ inputs.model }}" and "${{ inputs.model }}" not in judge["run"]
    assert '[[ "$MODEL" =~ ^[a-z][a-z0-9-]{0,29}$ ]]' in judge["run"]
    # While a proposed step waits for review, no later run replaces it.
    (pending,) = [s for s in job["steps"] if s.get("id") == "pending"]
    assert "gh pr list --head canary/prod --state open" in pending["run"]
    later = job["steps"][job["steps"].index(pending) + 2 :]
    assert later and all(s.get("if") == "steps.pending.outputs.open == '0'" for s in later)
    (pull_request,) = steps_using(job, "peter-evans/create-pull-request")
    # Only the stack file goes into the pull request, opened with a token whose events start the
    # preview workflow (GITHUB_TOKEN's do not).
    assert pull_request["with"]["add-paths"] == "stacks/Pulumi.prod.yaml"
    assert pull_request["with"]["token"] == "${{ steps.app-token.outputs.token }}"
    for checkout in steps_using(job, "actions/checkout"):
        assert checkout["with"]["persist-credentials"] is False


def _ci_run(selection: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTEST_ADDOPTS": selection}
    return subprocess.run([str(ROOT / ".ci" / "run")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_ci_entry_point_passes_and_fails_with_the_suite():
    # One test of one file: what is checked is the exit status through .ci/run, make and pytest's workers (this run
    # collects the whole suite already; collecting it again in each worker of each run here costs seconds).
    passing = _ci_run("tests/test_project_file.py -k test_project_basics")
    assert passing.returncode == 0, passing.stdout + passing.stderr
    failing = _ci_run(
        "tests/test_project_file.py -k test_project_basics --deselect tests/test_project_file.py::test_project_basics"
        " -p no:cacheprovider"
    )
    # pytest exits 5 when nothing ran: make, then .ci/run, must fail with it.
    assert failing.returncode != 0


@pytest.mark.slow
def test_mandatory_violation_fails_the_preview(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"inference-graceful-drain": {"minTerminationGracePeriodSeconds": 900}}))
    out = tmp_path / "out"
    result = run_preview("--stack", "staging", "--out", str(out), "--policy-config", str(config))
    assert result.returncode == 1
    assert "MANDATORY inference-graceful-drain: terminationGracePeriodSeconds is 625" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "failed" and report["policies"]["failed"] is True
    diagnostics = report["policies"]["data"]["diagnostics"]
    assert {d["policy"] for d in diagnostics} == {"inference-graceful-drain"}
    assert {d["urn"].rsplit("::", 1)[-1] for d in diagnostics} == {
        "summarizer-v1-deployment",
        "summarizer-v2-deployment",
        "assistant-v1-deployment",
        "code-helper-v1-deployment",
        "rag-answerer-v1-deployment",
        "embedder-v1-deployment",
    }
    assert "| inference-graceful-drain | mandatory | summarizer-v1-deployment |" in (out / "report.md").read_text()


@pytest.mark.slow
def test_advisory_violation_is_reported_without_failing(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_text(
        json.dumps({"inference-graceful-drain": {"enforcementLevel": "advisory", "minTerminationGracePeriodSeconds": 900}})
    )
    result = run_preview("--stack", "staging", "--out", str(tmp_path / "out"), "--policy-config", str(config))
    assert result.returncode == 0
    assert "ADVISORY inference-graceful-drain" in result.stdout


def test_ci_script_runs_make_test():
    script = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in script and script.strip().endswith("make test")
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_make_preview_passes_a_baseline_on():
    lines = subprocess.run(
        ["make", "-n", "preview", "STACK=dev", "BASELINE=build/baseline/dev"], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout.splitlines()  # fmt: skip
    (run,) = [line for line in lines if " -m preview --stack dev" in line]
    assert run.endswith("--baseline build/baseline/dev")


def test_a_hand_run_up_gives_the_pack_the_releases_deployed_last():
    """`make pulumi-up` (and `pulumi-preview`) build the policy config from the stack's last
    outputs, as the deploy workflow does, and pass it to the pack."""
    for target, command in (("pulumi-up", "pulumi up"), ("pulumi-preview", "pulumi preview")):
        lines = subprocess.run(
            ["make", "-n", target, "STACK=prod"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
        ).stdout.splitlines()
        outputs = lines.index("pulumi stack output --json > build/stack-outputs.prod.json")
        config = next(i for i, line in enumerate(lines) if "-m preview.previous_releases --from-outputs" in line)
        run = next(i for i, line in enumerate(lines) if line.startswith(command))
        assert outputs < config < run and lines[config].endswith("> build/policy-config.prod.json")
        assert "--policy-pack policies --policy-pack-config build/policy-config.prod.json" in lines[run]


def test_ci_fails_on_a_skip_not_on_the_allow_list_and_prints_the_list(tmp_path):
    """Under `.ci/run` (REQUIRE_REAL_SERVERS=1) any skipped test fails the run unless tests/conftest.py
    SKIPS_ALLOWED_IN_CI names it, and the list is printed at the end; elsewhere a skip stays a skip."""
    test_file = tmp_path / "test_skips.py"
    test_file.write_text("import pytest\n\n\ndef test_needs_something():\n    pytest.skip('something is missing')\n")
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", str(test_file)]
    env = {k: v for k, v in os.environ.items() if k != "REQUIRE_REAL_SERVERS"}
    enforced = subprocess.run(command, cwd=ROOT, env={**env, "REQUIRE_REAL_SERVERS": "1"}, capture_output=True, text=True)
    assert enforced.returncode == 1, enforced.stdout
    assert "skipped, and not in tests/conftest.py SKIPS_ALLOWED_IN_CI: Skipped: something is missing" in enforced.stdout
    assert "skips allowed in CI (tests/conftest.py SKIPS_ALLOWED_IN_CI): none" in enforced.stdout
    relaxed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert relaxed.returncode == 0 and "1 skipped" in relaxed.stdout, relaxed.stdout
    # A module skipped while it is collected, too; an expected failure is no skip.
    test_file.write_text("import pytest\n\npytest.importorskip('no_such_module_here')\n\n\ndef test_never():\n    pass\n")
    module = subprocess.run(command, cwd=ROOT, env={**env, "REQUIRE_REAL_SERVERS": "1"}, capture_output=True, text=True)
    assert module.returncode != 0 and "skipped while collected, and not in SKIPS_ALLOWED_IN_CI" in module.stdout, module.stdout
    test_file.write_text("import pytest\n\n\n@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert False\n")
    xfail = subprocess.run(command, cwd=ROOT, env={**env, "REQUIRE_REAL_SERVERS": "1"}, capture_output=True, text=True)
    assert xfail.returncode == 0 and "1 xfailed" in xfail.stdout, xfail.stdout
