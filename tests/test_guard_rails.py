"""Production guard rails (platform_config/guard_rails.py, the preview's Guard rails stage): a change that weakens a
security property of a production stack, or removes every server of a model or a tenant, is refused unless the stack
file acknowledges it by name, and an acknowledged one is still listed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from platform_config.guard_rails import posture_problem, security_posture, weakenings, wider_public_cidrs
from preview.sections import guard_rail_section

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


def _model(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in raw["models"] if m["name"] == name)


def _tenant(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in raw["tenants"] if t["name"] == name)


ATTACKER_KEYS = "https://keys.attacker.example.net/jwks.json"
# An RSA public key (RFC 7517 appendix A.1's example modulus) as an inline key set, and another key beside it.
MODULUS = (
    "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjB"
    "ZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8"
    "KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_"
    "xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"
)
KEY = {"kty": "RSA", "kid": "2011-04-29", "e": "AQAB", "n": MODULUS}
OTHER_KEY = {**KEY, "kid": "attacker", "e": "AQAC"}


def _inline(*keys: dict[str, str]) -> Callable[[dict[str, Any]], Any]:
    def change(raw: dict[str, Any]) -> None:
        _auth(raw).pop("jwksUri", None)
        _auth(raw)["jwks"] = json.dumps({"keys": list(keys)})

    return change


def _move_llama_1b(raw: dict[str, Any]) -> None:
    """llama-1b from team-a to serving, whose quota makes room for it."""
    _model(raw, "llama-1b")["tenant"] = "serving"
    quota = _tenant(raw, "serving")["quota"]
    quota["mig"]["1g.10gb"] = 8
    quota.update(pods=70, cpu="700", memory="5400Gi")


def _replace_70b(raw: dict[str, Any]) -> None:
    """Every version of llama-70b renamed: the model stays, none of its servers does."""
    model = _model(raw, "llama-70b")
    model["versions"][0]["name"] = "v9"
    model["release"]["stable"] = "v9"


def _plain_http_inside(raw: dict[str, Any]) -> None:
    raw["traffic"].pop("tlsCredentialName")
    raw["traffic"]["plainHttp"] = True


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


# The weakenings a review found the rails blind to: another key source or claim, a model moved or every server of it
# replaced, TLS gone inside the VPC, new cluster admins or tenant groups, a laxer Pod Security level, leaving production.
@pytest.mark.parametrize(
    "change, acknowledgement",
    [
        (lambda raw: _auth(raw).update(jwksUri=ATTACKER_KEYS), "weaken-authentication"),
        (_inline(KEY), "weaken-authentication"),
        (lambda raw: _auth(raw).update(tierClaim="role"), "weaken-authentication"),
        (lambda raw: _auth(raw).update(userClaim="email"), "weaken-authentication"),
        (lambda raw: _auth(raw).update(tenantClaim="groups"), "weaken-authentication"),
        (_plain_http_inside, "plain-http-internal"),
        (
            lambda raw: _eks(raw)["adminPrincipalArns"].append("arn:aws:iam::210987654321:role/contractor"),
            "widen-cluster-admins",
        ),  # fmt: skip
        (lambda raw: raw.update(environment="staging"), "leave-production"),
        (_move_llama_1b, "move-model:llama-1b"),
        (_replace_70b, "replace-servers:llama-70b"),
        (lambda raw: _tenant(raw, "team-a")["groups"].append("contractors"), "widen-groups:team-a"),
        (lambda raw: _tenant(raw, "team-b").update(podSecurity="baseline"), "relax-pod-security:team-b"),
        (lambda raw: _tenant(raw, "team-b")["s3Prefixes"].append("s3://team-b-archive"), "widen-data:team-b"),
        (lambda raw: raw["weightMirror"].update(bucket="someones-weights"), "change-weight-mirror"),
        (lambda raw: raw["weightMirror"].update(create=False), "change-weight-mirror"),
    ],
    ids=[
        "jwks-uri",
        "inline-jwks",
        "tier-claim",
        "user-claim",
        "tenant-claim-renamed",
        "plain-http-internal",
        "cluster-admin",
        "leave-production",
        "move-model",
        "replace-servers",
        "widen-groups",
        "relax-pod-security",
        "widen-data",
        "weight-mirror-bucket",
        "weight-mirror-not-created",
    ],
)
def test_each_weakening_the_rails_missed_is_found_and_named(change, acknowledgement):
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


def test_a_deployed_prefix_with_an_empty_path_segment_holds_nothing_now():
    """A prefix an older program took with a `//` (and granted as the location without it) is one s3_parts refuses
    now: it holds none of the stack's prefixes, so they are new data to acknowledge, and the comparison does not fail."""
    before = posture(raw_stack("prod"))
    before["tenantData"] = {**before["tenantData"], "team-b": ["s3://team-b-batch//"]}
    assert [w.acknowledgement for w in weakenings(before, posture(raw_stack("prod")))] == ["widen-data:team-b"]


def test_a_narrow_public_endpoint_and_an_older_posture_are_no_weakening():
    before = posture(raw_stack("prod"))
    narrow = changed(lambda raw: _eks(raw).update(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"]))
    assert weakenings(before, posture(narrow)) == []
    # A posture of an older program, without a field: that field is not compared.
    assert weakenings({"models": before["models"]}, posture(raw_stack("prod"))) == []


def test_an_inline_key_set_weakens_by_each_key_it_did_not_hold():
    """A key signs tokens the gateway takes whatever their `iss`: a key added, or one changed in any member (here its
    modulus under the same kid), is a new signer; a key removed only narrows."""
    before = posture(changed(_inline(KEY)))
    (added,) = weakenings(before, posture(changed(_inline(KEY, OTHER_KEY))))
    assert added.acknowledgement == "weaken-authentication" and "kid attacker" in added.message, added
    forged = {**KEY, "n": KEY["n"][:-4] + "AAAA"}
    (changed_key,) = weakenings(before, posture(changed(_inline(forged))))
    assert "kid 2011-04-29" in changed_key.message, changed_key
    assert weakenings(posture(changed(_inline(KEY, OTHER_KEY))), before) == []
    # From an inline set back to a URI: another key source.
    (source,) = weakenings(before, posture(raw_stack("prod")))
    assert source.acknowledgement == "weaken-authentication" and "jwks.json" in source.message, source


def _promote_llama_8b(raw: dict[str, Any]) -> None:
    _model(raw, "llama-8b")["release"] = {"stable": "v2"}


def _new_tenant(raw: dict[str, Any]) -> None:
    raw["tenants"].append({"name": "team-c", "groups": ["team-c-developers"], "pools": ["l4-batch"],
                           "podSecurity": "baseline", "quota": {"cpu": "1", "memory": "1Gi", "pods": 1}})  # fmt: skip


def _team_b_archive(prefix: str) -> Callable[[dict[str, Any]], Any]:
    return lambda raw: _tenant(raw, "team-b")["s3Prefixes"].append(prefix)


@pytest.mark.parametrize(
    "before_change, after_change, expected",
    [
        (None, _promote_llama_8b, []),  # the canary becomes stable: its servers stay
        (None, _new_tenant, []),  # a new tenant's groups and level reach nothing that was
        (lambda raw: _tenant(raw, "team-a")["groups"].append("contractors"), None, []),  # a group removed
        (lambda raw: _tenant(raw, "team-b").update(podSecurity="baseline"), None, []),  # back to restricted
        (lambda raw: _auth(raw).update(tenantClaim=None), None, []),  # tenant scoping turned on
        (_move_llama_1b, None, ["move-model:llama-1b"]),  # moved back: the move alone, not a widening of its callers
        # A prefix narrowed to a folder of one it held, or removed: nothing new to reach.
        (_team_b_archive("s3://team-b-archive"), _team_b_archive("s3://team-b-archive/2026"), []),
        (_team_b_archive("s3://team-b-archive"), None, []),
    ],
    ids=[
        "promote-canary",
        "new-tenant",
        "group-removed",
        "pod-security-restricted",
        "tenant-scoping-on",
        "moved-back",
        "data-narrowed",
        "data-removed",
    ],
)
def test_changes_that_take_nothing_away_weaken_nothing(before_change, after_change, expected):
    before = posture(changed(before_change or (lambda raw: None)))
    after = posture(changed(after_change or (lambda raw: None)))
    assert before != after
    assert [w.acknowledgement for w in weakenings(before, after)] == expected


@pytest.mark.parametrize(
    "before, after, wider",
    [
        (None, ["203.0.113.0/24"], []),  # public, but to an office's range
        (None, ["0.0.0.0/0"], ["0.0.0.0/0"]),
        (["203.0.113.0/24"], ["10.0.0.0/8"], ["10.0.0.0/8"]),  # a /24 widened to a /8
        (["10.0.0.0/8"], ["0.0.0.0/0"], ["0.0.0.0/0"]),  # a wide one widened again
        (["10.0.0.0/8"], ["10.0.0.0/9", "10.128.0.0/9"], []),  # within what was public
        (["0.0.0.0/0"], ["0.0.0.0/0"], []),
        (["not a cidr"], ["10.0.0.0/8"], ["10.0.0.0/8"]),  # a baseline's that does not parse holds nothing
    ],
)
def test_a_public_endpoint_is_widened_by_a_wide_cidr_it_did_not_admit(before, after, wider):
    assert wider_public_cidrs(before, after) == wider


def test_only_a_posture_of_the_exported_shape_is_compared():
    exported = posture(raw_stack("prod"))
    assert posture_problem(exported) is None
    assert posture_problem({**exported, "production": "no"}) == "production: is str, not true or false"
    assert posture_problem({**exported, "models": {"llama-1b": {"servers": "v1"}}}) == (
        "models.llama-1b.servers: is str, not a list of strings"
    )
    assert posture_problem({**exported, "jwks": [{"kid": "a"}]}) == "jwks: is list, not null or a list of {kid, sha256}"


def _rows(section: Any) -> dict[str, str]:
    return {row["acknowledgement"]: row["verdict"] for row in section.data["weakenings"]}


def test_a_stack_that_was_production_is_held_until_it_acknowledges_leaving():
    """The baseline's word counts: a change that says `environment: staging` does not turn refusals into notes."""
    prod = posture(raw_stack("prod"))

    def downgraded(*acknowledge: str, group_of: str = "team-a") -> dict[str, Any]:
        def change(raw: dict[str, Any]) -> None:
            raw.update(environment="staging", acknowledge=list(acknowledge))
            _tenant(raw, group_of)["groups"].append("contractors")

        return posture(changed(change))

    section = guard_rail_section(prod, downgraded(), "deployed")
    assert section is not None and section.failed
    assert _rows(section) == {"leave-production": "refused", "widen-groups:team-a": "refused"}
    # Acknowledged, in the change that leaves: listed, and the change goes through.
    section = guard_rail_section(prod, downgraded("leave-production", "widen-groups:team-a"), "deployed")
    assert section is not None and not section.failed
    assert _rows(section) == {"leave-production": "acknowledged", "widen-groups:team-a": "acknowledged"}
    # Once the deployed stack is staging, the next change is only noted.
    section = guard_rail_section(downgraded(group_of="team-b"), downgraded(), "deployed")
    assert section is not None and not section.failed and _rows(section) == {"widen-groups:team-a": "noted (not production)"}


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


def _hostile_change(raw: dict[str, Any]) -> None:
    """One change doing at once every weakening that fits together, saying it is staging now: another key source and
    claims, tenant scoping off, TLS gone inside the VPC, the API public to a /8, a new cluster admin, a model moved
    to another tenant, every server of another replaced, a group added to a tenant, a tenant's Pod Security relaxed."""
    raw["environment"] = "staging"
    _auth(raw).update(jwksUri=ATTACKER_KEYS, tierClaim="role", userClaim="email", tenantClaim=None)
    _plain_http_inside(raw)
    _eks(raw).update(endpointPublicAccess=True, publicAccessCidrs=["10.0.0.0/8"])
    _eks(raw)["adminPrincipalArns"].append("arn:aws:iam::210987654321:role/contractor")
    _move_llama_1b(raw)
    _replace_70b(raw)
    _tenant(raw, "team-a")["groups"].append("contractors")
    _tenant(raw, "team-b")["podSecurity"] = "baseline"


def _careless_change(raw: dict[str, Any]) -> None:
    """The weakenings that do not fit with the other ones: the gateway on the internet without TLS, a tenant (team-b,
    its batch job and its place among callers) and a model removed, another model's callers widened."""
    raw["traffic"].pop("tlsCredentialName")
    raw["traffic"].update(plainHttp=True, loadBalancerScheme="internet-facing")
    raw["tenants"] = [t for t in raw["tenants"] if t["name"] != "team-b"]
    raw["batchJobs"] = [j for j in raw.get("batchJobs", []) if j["tenant"] != "team-b"]
    for model in raw["models"]:
        if "callers" in model:
            model["callers"] = [c for c in model["callers"] if c != "team-b"]
    _drop_model("llama-70b")(raw)
    _model(raw, "llama-1b")["callers"] = ["serving"]


HOSTILE = {
    "weaken-authentication": 3,  # the key source, the tier claim, the user claim
    "disable-tenant-scoping": 1,
    "plain-http-internal": 1,
    "public-api-endpoint": 1,
    "widen-cluster-admins": 1,
    "leave-production": 1,
    "move-model:llama-1b": 1,
    "replace-servers:llama-70b": 1,
    "widen-groups:team-a": 1,
    "relax-pod-security:team-b": 1,
}
CARELESS = {"plain-http-internet-facing": 1, "remove-tenant:team-b": 1, "remove-model:llama-70b": 1, "widen-callers:llama-1b": 1}


@pytest.mark.parametrize(
    "change, expected", [(_hostile_change, HOSTILE), (_careless_change, CARELESS)], ids=["hostile", "careless"]
)
def test_each_weakening_of_a_production_stack_is_refused_by_name_unless_acknowledged(deployed, tmp_path, change, expected):
    """Against the committed prod stack as deployed: every weakening refused (exit 1), each naming the acknowledgement
    that would accept it, even where the change says the stack is no longer production; acknowledged, each is listed
    and the guard rails pass."""
    raw = changed(change)
    code, report, printed = _preview(tmp_path / "refused", raw, deployed)
    assert code == 1 and "Traceback" not in printed, printed
    rows = report["guardRails"]["data"]["weakenings"]
    assert {name: sum(r["acknowledgement"] == name for r in rows) for name in expected} == expected, rows
    assert len(rows) == sum(expected.values()) and all(r["verdict"] == "refused" for r in rows), rows
    for name in expected:
        assert f"REFUSED      {name}: " in printed and f"(add acknowledge: [{name}] to the stack file" in printed, printed
    if change is _careless_change:
        removed = next(r for r in rows if r["acknowledgement"] == "remove-model:llama-70b")
        assert removed["message"] == "model llama-70b and every server of it are removed"

    raw["acknowledge"] = sorted(expected)
    code, report, printed = _preview(tmp_path / "acknowledged", raw, deployed)
    section = report["guardRails"]
    assert not section["failed"] and {r["verdict"] for r in section["data"]["weakenings"]} == {"acknowledged"}, printed
    assert len(section["data"]["weakenings"]) == sum(expected.values()), section
    if change is _careless_change:
        assert code == 0, printed
    else:
        # The pack holds the stack named prod to production's floors whatever its environment says (its own
        # productionStacks), and the program sized the control plane for staging: the guard rails pass, the pack not.
        failed = {name for name, stage in report.items() if isinstance(stage, dict) and stage.get("failed")}
        mandatory = {d["policy"] for d in report["policies"]["data"]["diagnostics"] if d["level"] == "mandatory"}
        assert code == 1 and failed == {"policies"} and mandatory == {"control-plane-availability"}, printed


def test_an_acknowledgement_the_change_does_not_need_fails_a_production_preview(deployed, tmp_path):
    """It would otherwise approve a later change of the same kind without anyone naming it."""
    raw = changed(lambda raw: raw.update(acknowledge=["weaken-authentication"]))
    code, report, printed = _preview(tmp_path, raw, deployed)
    section = report["guardRails"]
    assert code == 1 and section["failed"] and section["data"]["unusedAcknowledgements"] == ["weaken-authentication"]
    assert PROJECT in printed or "unused" in printed
