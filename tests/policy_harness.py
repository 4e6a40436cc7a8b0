"""The policy pack's validators called in the test's process, as pulumi-policy's analyzer calls them, without the
pack's process or its gRPC interface: the fast way to test a rule.

`PolicyHarness` answers `analyze` and `analyze_stack` like preview.policy_runner.PolicyPack (the same Diagnostic,
level and message, masked alike) from the policies the pack serves (policies/inference_governance/pack.py), through
the SDK's own pieces (pulumi_policy 1.21.0 `policy.py`, `_PolicyAnalyzerServicer`):
- the SDK's servicer is built from the pack's name, level and policies: its GetAnalyzerInfo describes the pack, and
  its Configure takes the request the runner sends (policy_runner.configure_request: levels, the schemas' defaults,
  the overrides), so each policy gets its level and its config from the SDK's own `_get_enforcement_level` and
  `_get_policy_config`;
- each resource's properties go the way the engine sends them and the servicer reads them: the recorded value in
  its wire form, a protobuf Struct serialized and parsed again, `MessageToDict`, `deserialize_properties`, then the
  SDK's `unknown_checking_proxy`; the arguments are the SDK's ResourceValidationArgs, PolicyResource (parent and
  dependencies linked by URN) and StackValidationArgs; violations are reported through the servicer's own
  `_create_report_violation`;
- the loop over the policies is the servicer's Analyze / AnalyzeStack: disabled policies and policies of the other
  kind skipped, remediate reported as mandatory, an unknown value an advisory "can't run policy" diagnostic;
- the validators run with the pulumi runtime configured as the pack process configures it
  (`_configure_runtime_settings`: the stack config of PULUMI_CONFIG, the project and stack, a dry run), inside a
  context of their own, so `pulumi.get_stack()` is the pack's stack and the test process's own settings (its mock
  engine's) stay as they were.

What is faster: no process, no Struct for the whole stack per request, and each distinct property value decoded
once per test process (by its wire form; the rules only read what they are given, as the pack's own decode_once assumes
within a request). tests/test_policies.py holds the harness's verdicts to the pack's, over the analyzer
protocol, on every committed stack and on changed ones.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from inspect import isawaitable
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pulumi.runtime
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import policy as sdk
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from preview.engine import RecordedResource
from preview.masking import secret_values
from preview.performance import preview_policy_config
from preview.policy_runner import Diagnostic, configure_request, env_config, response_diagnostics, wire_struct, wire_value
from preview.stack_config import load_project, load_stack_config

from .helpers import IMAGES_BY_TAG, PROJECT, ROOT

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance.pack import ENFORCEMENT_LEVEL, NAME, POLICIES  # noqa: E402

# Each distinct property value as the servicer decodes it, by its wire form: shared by every harness of the process,
# since decoding reads neither the stack nor the policy config.
_DECODED: dict[str, Mapping[str, Any]] = {}

# What the SDK's PolicyPack reports as its version, whatever PulumiPolicy.yaml says (pulumi_policy/policy.py).
SDK_PACK_VERSION = "0.0.1"


class PolicyHarness:
    """The pack's policies for one stack (its config as `PolicyPack` is started with), configured like the preview's
    own run (`preview_policy_config(overrides)`, with IMAGES_BY_TAG under the overrides), called directly."""

    def __init__(self, stack: str = "prod", overrides: dict[str, Any] | None = None):
        config = load_stack_config(load_project(ROOT), stack)
        self.stack = stack
        self.secrets = secret_values(config.values, config.secret_keys)
        self._pulumi_config = env_config(config.values)
        self._servicer = sdk._PolicyAnalyzerServicer(NAME, SDK_PACK_VERSION, POLICIES, ENFORCEMENT_LEVEL)
        self.levels = self.configure(self.info(), preview_policy_config({**IMAGES_BY_TAG, **(overrides or {})}))

    def info(self) -> analyzer_pb2.AnalyzerInfo:
        return self._servicer.GetAnalyzerInfo(None, None)

    def configure(self, info: analyzer_pb2.AnalyzerInfo, overrides: dict[str, Any]) -> dict[str, str]:
        """As PolicyPack.configure: the overrides checked and the defaults filled in, the SDK configured with them."""
        request, levels = configure_request(info, overrides)
        self._servicer.Configure(request, None)
        return levels

    # --- what the engine asks --------------------------------------------------------------------

    def analyze(self, resource: RecordedResource, provider: RecordedResource | None = None) -> list[Diagnostic]:
        """The resource policies on one resource's inputs, as Analyze runs them."""
        options = self._options(resource.parent)
        providers = (
            None
            if provider is None
            else sdk.PolicyProviderResource(provider.type, decoded(provider.inputs), provider.urn, provider.name)
        )

        props = decoded(resource.inputs)

        def arguments(config: dict[str, Any] | None) -> sdk.ResourceValidationArgs:
            return sdk.ResourceValidationArgs(
                resource.type, props, resource.urn, resource.name, options, providers, config, self._stack_tags
            )

        diagnostics = self._run(sdk.ResourceValidationPolicy, arguments)
        for diagnostic in diagnostics:
            # Like the CLI (PolicyPack._analyzed): a resource policy's diagnostic belongs to the resource analyzed.
            diagnostic.urn = diagnostic.urn or resource.urn
        return diagnostics

    def analyze_stack(self, resources: Iterable[RecordedResource]) -> list[Diagnostic]:
        """The stack policies on every resource given (their outputs), as AnalyzeStack runs them."""
        records = list(resources)
        sent = [(record, decoded(record.outputs), self._options(record.parent)) for record in records]

        def arguments(config: dict[str, Any] | None) -> sdk.StackValidationArgs:
            # A PolicyResource of each per policy, linked to its parent and dependencies, as the servicer builds them.
            stack = [sdk.PolicyResource(r.type, props, r.urn, r.name, opts, None, None, [], {}) for r, props, opts in sent]
            by_urn = {resource.urn: resource for resource in stack}
            for (record, _, _), resource in zip(sent, stack, strict=True):
                if record.parent and record.parent in by_urn:
                    resource.parent = by_urn[record.parent]
                resource.dependencies.extend(by_urn[urn] for urn in record.dependencies if urn in by_urn)
            return sdk.StackValidationArgs(stack, config, self._stack_tags)

        return self._run(sdk.StackValidationPolicy, arguments)

    # --- the servicer's loop ---------------------------------------------------------------------

    def _run(self, kind: type[sdk.Policy], arguments: Callable[[dict[str, Any] | None], Any]) -> list[Diagnostic]:
        response = analyzer_pb2.AnalyzeResponse()
        contextvars.copy_context().run(self._validate_all, kind, arguments, response)
        return response_diagnostics(response, self.secrets)

    def _validate_all(self, kind: type[sdk.Policy], arguments: Callable[[dict[str, Any] | None], Any], response) -> None:
        """The SDK's loop over the policies (Analyze and AnalyzeStack), step for step."""
        self._as_the_pack_process()
        servicer = self._servicer
        for policy in POLICIES:
            level = servicer._get_enforcement_level(policy)
            if level == sdk.EnforcementLevel.DISABLED or not isinstance(policy, kind):
                continue
            assert isinstance(policy, (sdk.ResourceValidationPolicy, sdk.StackValidationPolicy))
            if isinstance(policy, sdk.ResourceValidationPolicy) and not policy.has_validation():
                continue  # the SDK reports it as not applicable, which the runner does not read
            if level == sdk.EnforcementLevel.REMEDIATE:
                level = sdk.EnforcementLevel.MANDATORY
            report = servicer._create_report_violation(response, policy.name, policy.description, level, policy.severity)
            args = arguments(servicer._get_policy_config(policy.name))
            try:
                result = policy.validate(args, report)
                if isawaitable(result):
                    loop = asyncio.new_event_loop()
                    loop.run_until_complete(asyncio.ensure_future(result, loop=loop))
                    loop.close()
            except UnknownValueError as error:
                response.diagnostics.append(
                    analyzer_pb2.AnalyzeDiagnostic(
                        policyName=policy.name,
                        policyPackName=NAME,
                        policyPackVersion=SDK_PACK_VERSION,
                        message=(
                            f"can't run policy '{policy.name}' from policy pack '{NAME}@v{SDK_PACK_VERSION}' during "
                            f"preview: {error.message}"
                        ),
                        urn="",
                        description=policy.description,
                        enforcementLevel=analyzer_pb2.ADVISORY,
                    )
                )
            except sdk._NotApplicableError:
                pass  # not applicable: no diagnostic

    def _as_the_pack_process(self) -> None:
        """The runtime as `_configure_runtime_settings` leaves it in the pack process the runner starts
        (PULUMI_CONFIG, PULUMI_PROJECT, PULUMI_STACK, PULUMI_DRY_RUN=true), in the current context only."""
        pulumi.runtime.set_all_config(dict(self._pulumi_config))
        pulumi.runtime.configure(
            pulumi.runtime.Settings(project=PROJECT, stack=self.stack, dry_run=True, organization="organization")
        )

    # --- what the servicer decodes ---------------------------------------------------------------

    _stack_tags: Mapping[str, str] = MappingProxyType({})  # the runner's ConfigureStack sends no tags

    def _options(self, parent: str | None) -> sdk.PolicyResourceOptions:
        options = analyzer_pb2.AnalyzerResourceOptions(parent=parent or "")
        return self._servicer._get_resource_options(SimpleNamespace(options=options))


def decoded(value: dict[str, Any]) -> Mapping[str, Any]:
    """Properties as the servicer reads them from the engine's request, decoded once per distinct wire form."""
    key = json.dumps(wire_value(value))
    found = _DECODED.get(key)
    if found is None:
        sent = struct_pb2.Struct.FromString(wire_struct(value).SerializeToString())
        found = unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(sent)))
        _DECODED[key] = found
    return found
