"""Chat templates (and the system prompts they write) as typed, pinned config: a version's `chatTemplate` file reaches
its servers as a ConfigMap that `--chat-template` names, a new template is a new version canaried like any other (the
release's header override and sticky buckets included) and the pull request's report shows the change; a file that
is not its pin, or not a template of the project, is refused naming the key."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from platform_config.chat_templates import MAX_TEMPLATE_BYTES

from .helpers import ROOT, PreviewRun, config_problems, raw_stack, run_preview, write_stack

TEMPLATE = "templates/rag-answerer/grounded-v1.jinja"


def rag_answerer(raw: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in raw["models"] if m["name"] == "rag-answerer")


def render(text: str, messages: list[dict[str, str]]) -> str:
    """A template as transformers renders it for vLLM 0.33.0 (apply_chat_template: a sandboxed Jinja2 environment that
    trims blocks), with the generation prompt."""
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(text).render(messages=messages, add_generation_prompt=True)


def test_staging_serves_its_rag_template_from_a_config_map_that_chat_template_names(previews):
    run = previews["staging"]
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    text = (ROOT / TEMPLATE).read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    (config_map,) = [
        m
        for m in run.manifests()
        if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "rag-answerer-v1-chat-template-a6f7177f62"
    ]
    assert config_map["metadata"]["namespace"] == "team-search" and config_map["immutable"] is True
    assert config_map["data"] == {"chat-template.jinja": text}
    (deployment,) = [m for m in run.manifests() if m["kind"] == "Deployment" and m["metadata"]["name"] == "rag-answerer-v1"]
    pod = deployment["spec"]["template"]
    (vllm,) = [c for c in pod["spec"]["containers"] if c["name"] == "vllm"]
    at = vllm["args"].index("--chat-template")
    assert vllm["args"][at + 1] == "/etc/vllm/chat-template/chat-template.jinja"
    assert {"name": "chat-template", "mountPath": "/etc/vllm/chat-template", "readOnly": True} in vllm["volumeMounts"]
    assert {"name": "chat-template", "configMap": {"name": "rag-answerer-v1-chat-template-a6f7177f62"}} in pod["spec"]["volumes"]
    assert pod["metadata"]["annotations"]["inference.platform/chat-template"] == f"{TEMPLATE}@sha256:{digest}"
    # Servers of versions without a template keep the one their weights ship with.
    (summarizer,) = [m for m in run.manifests() if m["kind"] == "Deployment" and m["metadata"]["name"] == "summarizer-v1"]
    assert "--chat-template" not in json.dumps(summarizer["spec"]["template"]["spec"]["containers"])


def test_the_committed_template_renders_qwens_turns_with_its_system_prompt_unless_the_request_brings_one():
    text = (ROOT / TEMPLATE).read_text()
    question = [{"role": "user", "content": "[1] Paris is in France.\nWhere is Paris?"}]
    prompt = render(text, question)
    assert prompt.startswith("<|im_start|>system\nAnswer only from the numbered passages")
    assert prompt.endswith("<|im_start|>user\n[1] Paris is in France.\nWhere is Paris?<|im_end|>\n<|im_start|>assistant\n")
    own = render(text, [{"role": "system", "content": "Be brief."}, *question])
    assert own.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and "Answer only" not in own


@pytest.fixture
def second_template() -> Any:
    """A new prompt for rag-answerer, committed (here: written) beside the first; removed after the test."""
    path = ROOT / "templates" / "rag-answerer" / f"test-{uuid.uuid4().hex[:12]}.jinja"
    text = (ROOT / TEMPLATE).read_text().replace("say that they do not.", "say so, and name what is missing.")
    path.write_text(text)
    try:
        yield path.relative_to(ROOT).as_posix(), hashlib.sha256(text.encode()).hexdigest()
    finally:
        path.unlink(missing_ok=True)


def test_a_new_prompt_is_a_version_canaried_with_the_release_and_shown_against_the_baseline(previews, second_template, tmp_path):
    file, digest = second_template
    raw = copy.deepcopy(raw_stack("staging"))
    model = rag_answerer(raw)
    v2 = copy.deepcopy(model["versions"][0]) | {"name": "v2", "chatTemplate": {"file": file, "sha256": digest}}
    model["versions"].append(v2)
    model["release"] = {"stable": "v1", "canary": "v2", "canaryWeight": 10}
    # Room for the canary's servers beside the stable version's.
    next(p for p in raw["nodePools"] if p["name"] == "l4-dedicated")["maxSize"] = 15
    search = next(t for t in raw["tenants"] if t["name"] == "team-search")
    search["quota"] |= {"gpu": 15, "cpu": "160", "memory": "500Gi", "pods": 64}
    raw["cluster"]["eks"]["systemNodeGroup"]["maxSize"] = 14
    stack = write_stack(tmp_path, raw)
    out = tmp_path / "out"
    result = run_preview(
        "--stack", "staging", "--config-file", str(stack), "--out", str(out), "--baseline", str(previews["staging"].out)
    )
    run = PreviewRun("staging", out, result)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    # The canary's servers get the new template, under the same weights.
    (config_map,) = [m for m in run.manifests() if m["metadata"]["name"] == "rag-answerer-v2-chat-template-" + digest[:10]]
    assert config_map["data"]["chat-template.jinja"] == (ROOT / file).read_text()
    # Its routes: the release's override header pins a tester to v2, and 10 of 100 user buckets stick to it.
    (service,) = [m for m in run.manifests() if m["kind"] == "VirtualService" and m["metadata"]["name"] == "rag-answerer"]
    routes = {r["name"]: r for r in service["spec"]["http"]}
    assert routes["premium-override-v2"]["match"][0]["headers"]["x-model-version"] == {"exact": "v2"}
    assert routes["premium-sticky-v2"]["match"][0]["headers"]["x-user-bucket"] == {"regex": "[0-9]"}
    # The report shows the change against the default branch's preview: the new template and servers, the routes.
    changes = run.report["changes"]
    added = {entry["urn"].rsplit("::", 1)[-1] for entry in changes["data"]["added"]}
    assert {"rag-answerer-v2-chat-template", "rag-answerer-v2-deployment"} <= added
    changed = {entry["urn"].rsplit("::", 1)[-1] for entry in changes["data"]["changed"]}
    assert "rag-answerer-route-virtual-service" in changed, changes["data"]
    markdown = (out / "report.md").read_text()
    assert "rag-answerer-v2-chat-template" in markdown


# --- refused -------------------------------------------------------------------------------------------------


def with_template(template: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(raw_stack("staging"))
    rag_answerer(raw)["versions"][0]["chatTemplate"] = template
    return raw


KEY = "inference-platform:models[4].versions[0].chatTemplate"


def test_a_template_that_is_not_its_pin_is_refused_with_the_files_digest():
    digest = hashlib.sha256((ROOT / TEMPLATE).read_bytes()).hexdigest()
    (problem,) = config_problems(with_template({"file": TEMPLATE, "sha256": "0" * 64}))
    assert problem.startswith(f"{KEY}.sha256: {'0' * 64} is not the SHA-256 of {TEMPLATE}, which is {digest}")


@pytest.mark.parametrize(
    ("file", "said"),
    [
        ("templates/rag-answerer/missing.jinja", "file: templates/rag-answerer/missing.jinja: no such file in the project"),
        ("templates/../stacks/Pulumi.staging.jinja", "is not a .jinja file under templates/"),
        ("/etc/passwd.jinja", "is not a .jinja file under templates/"),
        ("templates/.hidden.jinja", "is not a .jinja file under templates/"),
        ("stacks/Pulumi.staging.yaml", "is not a .jinja file under templates/"),
    ],
)
def test_a_template_outside_the_projects_templates_is_refused_naming_the_key(file, said):
    problems = config_problems(with_template({"file": file, "sha256": "0" * 64}))
    assert any(p.startswith(f"{KEY}.") and said in p for p in problems), problems


def test_a_link_an_oversized_file_or_an_embeddings_server_is_refused(tmp_path):
    folder = ROOT / "templates" / f"test-{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    try:
        link = folder / "link.jinja"
        os.symlink(ROOT / TEMPLATE, link)
        # A linked folder leads out of templates/: a file through it is refused before it is read.
        (tmp_path / "x.jinja").write_text("{{ messages }}")
        (folder / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
        through = folder / "elsewhere" / "x.jinja"
        pipe = folder / "pipe.jinja"
        os.mkfifo(pipe)  # read, it would block the preview
        big = folder / "big.jinja"
        big.write_text("x" * (MAX_TEMPLATE_BYTES + 1))
        linked = "not a regular file of templates/ (a link on its path is not followed)"
        for path, said in (
            (link, linked),
            (through, linked),
            (pipe, "not a regular file (a folder, a pipe or a device is not read)"),
            (big, f"{MAX_TEMPLATE_BYTES + 1} bytes, more than a chat template's {MAX_TEMPLATE_BYTES}"),
        ):
            relative = path.relative_to(ROOT).as_posix()
            (problem,) = config_problems(with_template({"file": relative, "sha256": "0" * 64}))
            assert problem.startswith(f"{KEY}.file: {relative}: {said}"), problem
    finally:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()
    raw = copy.deepcopy(raw_stack("staging"))
    embedder = next(m for m in raw["models"] if m["name"] == "embedder")
    digest = hashlib.sha256((ROOT / TEMPLATE).read_bytes()).hexdigest()
    embedder["versions"][0]["chatTemplate"] = {"file": TEMPLATE, "sha256": digest}
    (problem,) = config_problems(raw)
    assert problem == (
        "inference-platform:models[5].versions[0].chatTemplate: profile 'embeddings' serves embeddings: no chat request "
        "reaches a template"
    )


def test_config_for_a_template_is_checked_whole(tmp_path):
    problems = config_problems(with_template({"file": TEMPLATE, "sha256": "ABC", "inline": "{{ x }}"}))
    assert any(p.startswith(f"{KEY}.sha256: 'ABC' is not a SHA-256 in lower-case hex") for p in problems), problems
    assert any(p.startswith(f"{KEY}.inline") for p in problems), problems
    assert Path(ROOT / TEMPLATE).is_file()
