"""Report sections of the preview's checks: the objects against their schemas, admission and scheduling, the first
`up`'s order, the upstream pins, the policy pack's verdict and the production guard rails."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from platform_config.guard_rails import weakenings

from ..admission import AdmissionResult
from ..first_up import FirstUpResult
from ..policy_runner import PERFORMANCE_POLICY, PolicyRun
from ..report import Section

if TYPE_CHECKING:  # jsonschema loads only when the schema stage runs
    from ..schemas import ObjectResult
    from ..upstream import PinResult


def schema_section(results: list[ObjectResult], kubernetes_version: str, crd_dir: str) -> Section:
    invalid = [r for r in results if r.status == "invalid"]
    unvalidated = [r for r in results if r.status == "not-validated"]
    valid = len(results) - len(invalid) - len(unvalidated)
    summary = f"{valid}/{len(results)} objects valid (Kubernetes {kubernetes_version} strict + CRD schemas)"
    if invalid:
        summary += f", {len(invalid)} invalid"
    if unvalidated:
        summary += f", {len(unvalidated)} not validated (no schema)"
    lines = []
    for r in invalid:
        lines.append(f"INVALID {r.label}")
        lines.extend(f"  {error}" for error in r.errors[:5])
    lines.extend(f"NOT VALIDATED {r.label}: {r.schema}" for r in unvalidated)
    rows = ["| object | schema | result |", "|---|---|---|"]
    for r in results:
        verdict = {"valid": "valid", "invalid": "**invalid**: " + "; ".join(r.errors[:3]), "not-validated": "**not validated**"}[
            r.status
        ]
        rows.append(f"| {r.label} | {r.schema} | {verdict} |")
    data = {
        "kubernetesVersion": kubernetes_version,
        "crdSchemaDir": crd_dir,
        "valid": valid,
        "invalid": [{"object": r.label, "schema": r.schema, "errors": r.errors} for r in invalid],
        "notValidated": [{"object": r.label, "looked": r.schema} for r in unvalidated],
        "objects": [{"object": r.label, "schema": r.schema, "status": r.status} for r in results],
    }
    return Section("Schemas", summary, failed=bool(invalid), data=data, markdown="\n".join(rows), lines=lines)


def admission_section(result: AdmissionResult) -> Section:
    """Every pod template through admission and onto its pool at peak."""
    admitted = [w for w in result.workloads if not w.findings]
    scheduled = sum(1 for w in result.workloads if w.pool is not None and w.placed >= w.peak)
    summary = (
        f"{len(admitted)}/{len(result.workloads)} pod templates admitted, {scheduled}/{len(result.workloads)} "
        f"schedulable at peak on their pools"
    )
    if result.findings:
        summary += f", {len(result.findings)} findings"
    if result.unchecked_placement_note:
        summary += f"; {result.unchecked_placement_note}"
    rows = ["| workload | pool | pods at peak | placed | admitted |", "|---|---|---:|---:|---|"]
    for w in result.workloads:
        verdict = "yes" if not w.findings else "**no**: " + "; ".join(w.findings[:3])
        rows.append(f"| {w.label} | {w.pool or '-'} | {w.peak} | {w.placed} | {verdict} |")
    data = {
        "workloads": [
            {"workload": w.label, "pool": w.pool, "peakPods": w.peak, "placedPods": w.placed, "findings": w.findings}
            for w in result.workloads
        ],
        "findings": result.findings,
        "leftToClusterScheduler": [w.label for w in result.left_to_cluster_scheduler],
    }
    return Section(
        "Admission and scheduling",
        summary,
        failed=result.failed,
        data=data,
        markdown="\n".join(rows),
        lines=list(result.findings),
    )


def first_up_section(result: FirstUpResult) -> Section:
    """Every webhook the installers register, what of the program's it intercepts, and what would
    be created before the webhook or CRD it needs."""
    webhooks = result.webhooks
    intercepting = sum(1 for _, _, hit in webhooks if hit)
    summary = (
        f"{len(webhooks)} admission webhooks from {len(result.installers)} installers, {intercepting} intercepting "
        "objects of this program"
    )
    if result.findings or result.unread:
        summary += f", {len(result.findings)} ordering findings"
        if result.unread:
            summary += f", {len(result.unread)} installers whose webhooks were not read"
    else:
        summary += ", each waited for by everything it intercepts"
    rows = [
        "| installer | webhook | kind | failure policy | intercepts | namespaces | objects | of this program | read at |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, w, hit in webhooks:
        rules = "; ".join(rule.describe() for rule in w.rules)
        namespaces = w.namespace_selector.describe() if w.namespace_selector else "all"
        objects = w.object_selector.describe() if w.object_selector else "all"
        policy = w.failure_policy + (f" ({w.note})" if w.note else "")
        rows.append(
            f"| {label} | `{w.name}` | {w.kind} | {policy} | {rules} | {namespaces} | {objects} | {len(hit)} | {w.source} |"
        )
    rows += ["", "| installer | awaited | CRD groups | read at |", "|---|---|---|---|"]
    for record in result.installers:
        awaited = "yes" if record.awaited else f"**no**: {record.unawaited_reason}"
        groups = ", ".join(record.installer.crd_groups) or "-"
        rows.append(f"| {record.label} | {awaited} | {groups} | {record.installer.read_at} |")
    lines = [
        *result.findings,
        *(f"{entry}; what it registers is unknown until read at its tag (preview/webhook_inventory/)" for entry in result.unread),
    ]
    if lines:
        rows += ["", *(f"- {line}" for line in lines)]
    data = {
        "installers": [
            {
                "installer": r.label,
                "awaited": r.awaited,
                "crdGroups": list(r.installer.crd_groups),
                "readAt": r.installer.read_at,
            }
            for r in result.installers
        ],
        "webhooks": [
            {
                "installer": label,
                "name": w.name,
                "kind": w.kind,
                "failurePolicy": w.failure_policy,
                "rules": [rule.describe() for rule in w.rules],
                "namespaceSelector": w.namespace_selector.describe() if w.namespace_selector else None,
                "objectSelector": w.object_selector.describe() if w.object_selector else None,
                "source": w.source,
                "intercepts": hit,
            }
            for label, w, hit in webhooks
        ],
        "findings": result.findings,
        "unread": result.unread,
    }
    return Section("First up", summary, failed=result.failed, data=data, markdown="\n".join(rows), lines=lines)


def upstream_section(results: list[PinResult], facts: str) -> Section:
    """Pins and rendered values against the upstream facts: verified, unverified, failed."""
    failed = [r for r in results if r.status == "failed"]
    unverified = [r for r in results if r.status == "unverified"]
    summary = f"{len(results) - len(failed) - len(unverified)}/{len(results)} verified against {facts}"
    if unverified:
        summary += f", {len(unverified)} unverified"
    if failed:
        summary += f", {len(failed)} failed"
    lines = [f"FAILED {r.pin} {r.version}: {d}" for r in failed for d in r.details]
    lines += [f"UNVERIFIED {r.pin} {r.version}: {'; '.join(r.details)}" for r in unverified]
    rows = ["| pin | version | status | details |", "|---|---|---|---|"]
    rows += [f"| {r.pin} | {r.version} | {r.status} | {'; '.join(r.details) or '-'} |" for r in results]
    data = {"factsDir": facts, "pins": [r.to_json() for r in results]}
    return Section("Upstream pins", summary, failed=bool(failed), data=data, markdown="\n".join(rows), lines=lines)


def policy_section(run: PolicyRun) -> Section:
    mandatory = run.mandatory
    advisory = [d for d in run.diagnostics if d not in mandatory]
    weakened = {
        p["name"]: p
        for p in run.policies
        if p["level"] != p["declaredLevel"] and p["name"] != PERFORMANCE_POLICY and p["name"] not in run.preview_levels
    }
    summary = (
        f"pack {run.pack} {run.version}: {len(run.policies)} policies over {run.analyzed} resources and the stack, "
        f"{len(mandatory)} mandatory and {len(advisory)} advisory violations"
    )
    disabled = sum(1 for p in run.policies if p["level"] == "disabled" and p["name"] != PERFORMANCE_POLICY)
    if disabled:
        summary += f"; {disabled} {'policy' if disabled == 1 else 'policies'} disabled"
    if any(p["name"] == PERFORMANCE_POLICY for p in run.policies):
        summary += f"; {PERFORMANCE_POLICY} held by the Serving performance stage"
    lines = [f"WARNING {w}" for w in run.warnings]
    lines += [
        f"{d.level.upper()} {d.policy}: {d.message.splitlines()[-1]}" + (f" [{d.urn.rsplit('::', 1)[-1]}]" if d.urn else "")
        for d in mandatory + advisory
    ]
    rows = ["| policy | level | resource | message |", "|---|---|---|---|"]
    rows += [
        f"| {d.policy} | {d.level} | {d.urn.rsplit('::', 1)[-1] if d.urn else '(stack)'} | {d.message.splitlines()[-1]} |"
        for d in mandatory + advisory
    ]
    if not run.diagnostics:
        rows = ["No violations. Policies: " + ", ".join(_policy_name(p) for p in run.policies) + "."]
    if weakened:
        rows = [
            "Levels set by the policy config:",
            "",
            "| policy | pack's level | level run |",
            "|---|---|---|",
            *(f"| {p['name']} | {p['declaredLevel']} | **{p['level']}** |" for p in weakened.values()),
            "",
            *rows,
        ]
    rows = [*(f"- **Warning:** {w}" for w in run.warnings), *([""] if run.warnings else []), *rows]
    data = {
        "pack": run.pack,
        "version": run.version,
        "policies": run.policies,
        "warnings": run.warnings,
        "analyzedResources": run.analyzed,
        "diagnostics": [d.to_json() for d in run.diagnostics],
        "engineLog": run.engine_log,
    }
    return Section("Policies", summary, failed=bool(mandatory), data=data, markdown="\n".join(rows), lines=lines)


def _policy_name(policy: dict[str, str]) -> str:
    """A policy's name, with the level it ran at when the policy config changed it (or where the preview holds it)."""
    if policy["name"] == PERFORMANCE_POLICY:
        return f"{policy['name']} (held by the Serving performance stage)"
    return policy["name"] if policy["level"] == policy["declaredLevel"] else f"{policy['name']} ({policy['level']})"


def guard_rail_section(previous: dict[str, Any] | None, current: dict[str, Any] | None, source: str) -> Section | None:
    """Production guard rails (platform_config/guard_rails.py): what this change weakens of the baseline's security
    posture (`securityPosture`), refused in a stack that is or was production (the baseline's word counts, not only
    the change's) unless its `acknowledge` names it; acknowledged ones are listed as findings, and an acknowledgement
    that names nothing this change does is reported too, so none outlives its change."""
    if current is None:
        return None
    if previous is None:
        return Section("Guard rails", f"nothing to compare against ({source})", data={"weakenings": []})
    found = weakenings(previous, current)
    acknowledged = set(current.get("acknowledged") or [])
    # A stack that was production stays held whatever the change says it is now: leaving production is itself a
    # weakening (leave-production), acknowledged in the same change.
    production = previous.get("production") is True or current.get("production") is True
    rows = []
    for weakening in found:
        if weakening.acknowledgement in acknowledged:
            verdict = "acknowledged"
        else:
            verdict = "refused" if production else "noted (not production)"
        rows.append({"acknowledgement": weakening.acknowledgement, "message": weakening.message, "verdict": verdict})
    unused = sorted(acknowledged - {w.acknowledgement for w in found})
    refused = [r for r in rows if r["verdict"] == "refused"]
    lines = [
        f"{'REFUSED' if r['verdict'] == 'refused' else r['verdict']:<12} {r['acknowledgement']}: {r['message']}"
        + (
            f" (add acknowledge: [{r['acknowledgement']}] to the stack file if this is meant)"
            if r["verdict"] == "refused"
            else ""
        )
        for r in rows
    ]
    lines += [f"{'unused':<12} {name}: this change weakens nothing it names; remove it" for name in unused]
    if refused:
        summary = f"{len(refused)} weakening(s) of a production stack not acknowledged (against {source})"
    elif rows:
        summary = f"{len(rows)} weakening(s), each acknowledged or outside production (against {source})"
    else:
        summary = f"this change weakens nothing (against {source})"
    table = ["| weakening | what | verdict |", "|---|---|---|"]
    table += [f"| {r['acknowledgement']} | {r['message']} | {r['verdict']} |" for r in rows]
    table += [f"| {name} | acknowledged, but this change does not do it | unused |" for name in unused]
    return Section(
        "Guard rails",
        summary,
        failed=bool(refused) or bool(unused and production),
        data={"weakenings": rows, "unusedAcknowledgements": unused},
        markdown="\n".join(table),
        lines=lines,
    )
