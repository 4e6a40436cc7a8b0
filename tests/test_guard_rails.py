"""Production guard rails (platform_config/guard_rails.py, the preview's Guard rails stage): a change that weakens a
security property of a production stack, or removes every server of a model or a tenant, is refused unless the stack
file acknowledges it by name, and an acknowledged one is still listed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from platform_config.guard_rails import security_posture, weakenings

from .helpers import PROJECT, raw_stack, run_preview, validate, write_stack

OTHER = "https://login.other.example.com"


def posture(raw: dict[str, Any]) -> dict[str, Any]:
    return security_posture(validate(raw).config)


def changed(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    raw = copy.deepcopy(raw_stack("prod"))
    change(raw)
    return raw


def _auth(raw: dict[str, Any]) -> dict[str, Any]:
    return raw["traffic"]["authentication"]


def _eks(raw: dict[str, Any]) -> dict[str, Any]:
    return raw["cluster"]["eks"]


def _drop_model(name: str) -> Callable[[dict[str, Any]], Any]:
    def change(raw: dict[str, Any]) -> None:
        raw["models"] = [m for m in raw["models"] if m["name"] != name]

    return change


@pytest.mark.parametrize(
    "change, acknowledgement",
    [
        (
            lambda raw: _auth(raw).update(issuer=OTHER, versionOverridePrincipals=[f"{OTHER}/canary-analysis"]),
            "weaken-authentication",
        ),  # fmt: skip
        (lambda raw: _auth(raw)["audiences"].append("another-app"), "weaken-authentication"),
        (lambda raw: _auth(raw)["versionOverridePrincipals"].append(f"{_auth(raw)['issuer']}/anyone"), "weaken-authentication"),
        (lambda raw: _auth(raw).update(tenantClaim=None), "disable-tenant-scoping"),
        (lambda raw: _eks(raw).update(endpointPublicAccess=True, publicAccessCidrs=["0.0.0.0/0"]), "public-api-endpoint"),
        (lambda raw: _eks(raw).update(endpointPublicAccess=True, publicAccessCidrs=["10.0.0.0/8"]), "public-api-endpoint"),
        (_drop_model("llama-1b"), "remove-model:llama-1b"),
        (
            lambda raw: raw["models"][2]["callers"].append("team-b")
            if "callers" in raw["models"][2]
            else raw["models"][2].update(callers=["team-b"]),
            "widen-callers:llama-1b",
        ),  # fmt: skip
    ],
    ids=[
        "issuer",
        "audience",
        "override-principal",
        "tenant-claim",
        "public-endpoint",
        "wide-cidr",
        "remove-model",
        "widen-callers",
    ],  # fmt: skip
)
def test_each_weakening_is_found_and_named(change, acknowledgement):
    before = posture(raw_stack("prod"))
    found = weakenings(before, posture(changed(change)))
    assert found and {w.acknowledgement for w in found} == {acknowledgement}, found


def test_plain_http_on_an_internet_facing_load_balancer_is_a_weakening():
    def exposed(raw: dict[str, Any]) -> None:
        raw["traffic"].pop("tlsCredentialName", None)
        raw["traffic"].update(plainHttp=True, loadBalancerScheme="internet-facing")

    before = posture(raw_stack("prod"))
    assert [w.acknowledgement for w in weakenings(before, posture(changed(exposed)))] == ["plain-http-internet-facing"]


def test_removing_a_tenant_names_the_tenant():
    before = {**posture(raw_stack("prod")), "tenants": ["serving", "team-a", "team-b", "team-c"]}
    assert [w.acknowledgement for w in weakenings(before, posture(raw_stack("prod")))] == ["remove-tenant:team-c"]


def test_a_narrow_public_endpoint_and_an_older_posture_are_no_weakening():
    before = posture(raw_stack("prod"))
    narrow = changed(lambda raw: _eks(raw).update(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"]))
    assert weakenings(before, posture(narrow)) == []
    # A posture of an older program, without a field: that field is not compared.
    assert weakenings({"models": before["models"]}, posture(raw_stack("prod"))) == []


# --- through the preview ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Path:
    """prod's outputs as `pulumi stack output --json` gives them, the posture the program exports."""
    from .helpers import Evaluated

    path = tmp_path_factory.mktemp("deployed") / "outputs.json"
    path.write_text(json.dumps({"securityPosture": Evaluated(raw_stack("prod")).outputs["securityPosture"]}))
    return path


def _preview(tmp_path: Path, raw: dict[str, Any], outputs: Path) -> tuple[int, dict[str, Any], str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    stack = write_stack(tmp_path, raw)
    out = tmp_path / "out"
    result = run_preview("--stack", "prod", "--config-file", str(stack), "--out", str(out), "--previous-outputs", str(outputs))
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return result.returncode, report, result.stdout + result.stderr


def test_a_production_change_removing_a_model_is_refused_unless_acknowledged(deployed, tmp_path):
    raw = changed(_drop_model("llama-1b"))
    code, report, printed = _preview(tmp_path / "refused", raw, deployed)
    assert code == 1, printed
    (row,) = report["guardRails"]["data"]["weakenings"]
    assert row == {"acknowledgement": "remove-model:llama-1b", "message": "model llama-1b and every server of it are removed",
                   "verdict": "refused"}  # fmt: skip
    assert "REFUSED      remove-model:llama-1b" in printed

    raw["acknowledge"] = ["remove-model:llama-1b"]
    code, report, printed = _preview(tmp_path / "acknowledged", raw, deployed)
    section = report["guardRails"]
    assert section["data"]["weakenings"][0]["verdict"] == "acknowledged" and not section["failed"], printed
    assert code == 0, printed


def test_an_acknowledgement_the_change_does_not_need_fails_a_production_preview(deployed, tmp_path):
    """It would otherwise approve a later change of the same kind without anyone naming it."""
    raw = changed(lambda raw: raw.update(acknowledge=["weaken-authentication"]))
    code, report, printed = _preview(tmp_path, raw, deployed)
    section = report["guardRails"]
    assert code == 1 and section["failed"] and section["data"]["unusedAcknowledgements"] == ["weaken-authentication"]
    assert PROJECT in printed or "unused" in printed
