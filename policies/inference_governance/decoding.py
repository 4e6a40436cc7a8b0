"""Each resource decoded once per analyzer request, not once per policy.

pulumi-policy 1.21.0 (`pulumi_policy/policy.py`, `_PolicyAnalyzerServicer`) turns a resource's
properties into Python values (`json_format.MessageToDict`, then `deserialize_properties`) inside
its loop over the policies: `AnalyzeStack` decodes the whole stack once per stack policy, `Analyze`
a resource once per resource policy, and both decode the resource's provider once per policy
(`_get_provider_resource`), and each time copies the result into a read-only view
(`unknown_checking_proxy`). The values are the same every time, and the rules only read them, so
one decoding and one view per request serve them all.

`decode_once()` makes the servicer's two calls remember, for the length of one `Analyze` or
`AnalyzeStack` call on its thread, what they returned for each message (by identity; the message is
kept, so its id cannot be reused meanwhile). Outside those calls (configuration, remediation) they
are the SDK's own. `Analyze` makes the resource's view, options and provider once per request
(`_analyze`, the SDK's own method with them taken out of the loop over the policies). `AnalyzeStack`
also builds the stack's resources (each one's `PolicyResource`, its options and provider, and the
links to its parent and dependencies) once per request instead of once per stack policy
(`_analyze_stack`, the SDK's own method with that loop taken out of the loop over the policies).
`AnalyzeStack`'s resources are decoded when a rule first reads their properties (`_StackResource`:
two in five no stack policy reads) and keep only their deserialized properties, read through views
made as the rules read them (`_LazyDict`, `_LazyList`) rather than the SDK's copy of the whole value
into views: at 200 models the pack's peak memory fell from 335 to 270 MiB with the views.
`POLICY_PACK_DECODE_EACH=1` leaves the SDK as it is, for the benchmark's comparison
(`benchmarks/bench_preview.py`).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from types import SimpleNamespace
from typing import Any, Callable

import pulumi_policy.policy as sdk
from google.protobuf import json_format, struct_pb2
from pulumi_policy import proxy
from pulumi_policy.deserialize import SPECIAL_SIG_KEY

from .stack_request import read_stack_properties_as_bytes

_requests = threading.local()


def _remembered(function: Callable[..., Any], table: str) -> Callable[..., Any]:
    def call(value: Any, *args: Any, **kwargs: Any) -> Any:
        tables = getattr(_requests, "tables", None)
        if tables is None or args or kwargs:
            return function(value, *args, **kwargs)
        seen = tables[table]
        hit = seen.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        result = function(value)
        seen[id(value)] = (value, result)
        return result

    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call


def _unremembered(function: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK's own function behind a remembered one (itself where the SDK is left as it is)."""
    return getattr(function, "__wrapped__", function)


def _one_request(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, request: Any, context: Any) -> Any:
        _requests.tables = {"messages": {}, "values": {}, "proxies": {}}
        try:
            return method(self, request, context)
        finally:
            _requests.tables = None

    return call


def sdk_as_is() -> bool:
    """`POLICY_PACK_DECODE_EACH=1`: the pack runs pulumi-policy as it is (the benchmark's comparison), none of its
    changes to the SDK applied."""
    return os.environ.get("POLICY_PACK_DECODE_EACH") == "1"


def decode_once() -> None:
    """Patch the SDK's servicer to decode each message once per request (see the module's docstring)."""
    if sdk_as_is() or getattr(sdk, "_decodes_once", False):
        return
    # The SDK's `json_format` is protobuf's module (imported here too): a copy of it, so only the SDK's reads change.
    sdk.json_format = SimpleNamespace(
        **{name: getattr(json_format, name) for name in dir(json_format) if not name.startswith("__")},
    )
    sdk.json_format.MessageToDict = _remembered(_message_to_dict, "messages")
    sdk.deserialize_properties = _remembered(sdk.deserialize_properties, "values")
    # The read-only view is a whole copy of the value too (`pulumi_policy/proxy.py` _proxy_helper walks it
    # eagerly), so it is shared as well; the rules only read it.
    sdk.unknown_checking_proxy = _remembered(sdk.unknown_checking_proxy, "proxies")
    servicer = sdk._PolicyAnalyzerServicer
    setattr(servicer, "Analyze", _one_request(_analyze))
    setattr(servicer, "AnalyzeStack", _one_request(_analyze_stack))
    # Its request read with each resource's properties as bytes, parsed when a rule first reads them.
    read_stack_properties_as_bytes()
    setattr(sdk, "_decodes_once", True)


class _Marked(Exception):
    """A table `deserialized` leaves to the SDK's two steps."""


def deserialized(message: struct_pb2.Struct) -> dict[str, Any]:
    """pulumi-policy 1.21.0's `deserialize_properties(MessageToDict(message))` (`pulumi_policy/deserialize.py`; here
    `struct_dict` for the second) in one walk rather than two: a table that is none of the SDK's special values (a
    secret, an asset, an archive, each marked by SPECIAL_SIG_KEY) deserializes to an equal table, so the one
    `struct_dict` makes serves. A message holding a marked table is read by the two steps (the same values, the same
    errors: a number JSON has no form for raises the printer's error either way). The SDK's second walk was 6% of
    the pack's time (its samples holding the interpreter lock) at 500 models."""
    try:
        return {key: _struct_value(value, True) for key, value in message.fields.items()}
    except _Marked:
        return _unremembered(sdk.deserialize_properties)(struct_dict(message))


def _message_to_dict(message: Any, *args: Any, **kwargs: Any) -> Any:
    """`json_format.MessageToDict`, a resource's properties (a `Struct`, with the default options) by `struct_dict`."""
    if args or kwargs or type(message) is not struct_pb2.Struct:
        return json_format.MessageToDict(message, *args, **kwargs)
    return struct_dict(message)


def struct_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    """What protobuf 5.29.6's `json_format.MessageToDict` makes of a `Struct` (json_format.py `_Printer`
    `_StructMessageToJsonObject`, `_ValueMessageToJsonObject`, `_ListValueMessageToJsonObject`, and `_FieldToJsonObject`
    for each kind), without its dispatch on each value's field descriptor: a fifth of the pack's time at 500 models
    was that printer turning resources' properties into dicts."""
    return {key: _struct_value(value, False) for key, value in message.fields.items()}


def _struct_value(value: struct_pb2.Value, unmarked: bool) -> Any:
    """A value as the printer makes it; `unmarked`: a table marked by SPECIAL_SIG_KEY raises `_Marked` instead."""
    which = value.WhichOneof("kind")
    if which == "string_value":
        return value.string_value
    if which == "struct_value":
        fields = value.struct_value.fields
        if unmarked and SPECIAL_SIG_KEY in fields:
            raise _Marked
        return {key: _struct_value(item, unmarked) for key, item in fields.items()}
    if which == "list_value":
        return [_struct_value(item, unmarked) for item in value.list_value.values]
    if which == "number_value":
        number = value.number_value
        if math.isinf(number):
            raise ValueError("Fail to serialize Infinity for Value.number_value, which would parse as string_value")
        if math.isnan(number):
            raise ValueError("Fail to serialize NaN for Value.number_value, which would parse as string_value")
        return number
    if which == "bool_value":
        return value.bool_value
    return None  # null_value, or no kind set


class _LazyDict(proxy._DictProxy):
    """pulumi-policy 1.21.0's read-only view of a dict (`pulumi_policy/proxy.py` `_DictProxy`: a value unknown at
    preview raises `UnknownValueError` naming its path), made as it is read rather than for the whole value at once
    (`_proxy_helper` copies every dict and list of it, each with a list of its path): a stack's views were the
    largest thing the pack held. What a rule reads is the same: each dict and list it reaches is such a view, with the
    same path, the same object each time it is read (a list's view compares by identity, as the SDK's does); only
    `["__target"]` differs, the value itself where the SDK's gives a copy of it whose insides are views."""

    def __getitem__(self, key: Any) -> Any:
        target, path = self._DictProxy__target, self._DictProxy__props_acc  # type: ignore[attr-defined]
        if key == "__target":
            return target
        return _child(self, key, proxy._raise_if_unknown(key, target[key], path), path)


class _LazyList(proxy._ListProxy):
    """`_ListProxy` made as it is read (`_LazyDict`); a slice is a list of the items' views, as the SDK's is, and an
    item's path names its index from the start, as the SDK's does, whichever way it was read."""

    def __getitem__(self, key: Any) -> Any:
        target, path = self._ListProxy__target, self._ListProxy__props_acc  # type: ignore[attr-defined]
        if key == "__target":
            return target
        if isinstance(key, slice):
            return [_child(self, i, target[i], path) for i in range(len(target))[key]]
        value = proxy._raise_if_unknown(key, target[key], path)
        return _child(self, key + len(target) if isinstance(key, int) and key < 0 else key, value, path)


def _child(view: Any, key: Any, value: Any, path: list[str]) -> Any:
    """The view of a dict's or list's item, made once per view and item (a value that is neither is itself)."""
    if not isinstance(value, dict | list):
        return value
    children = view.__dict__.setdefault("_children", {})
    child = children.get(key)
    if child is None:
        child = children[key] = _lazy_view(value, proxy._append_prop(path, key))
    return child


def _lazy_view(value: Any, path: list[str]) -> Any:
    if isinstance(value, dict):
        return _LazyDict(value, path)
    if isinstance(value, list):
        return _LazyList(value, path)
    return value


def _stack_resources(servicer: Any, request: Any) -> list[Any]:
    """The stack's resources as pulumi-policy 1.21.0 hands them to a stack policy (`pulumi_policy/policy.py`
    `_PolicyAnalyzerServicer.AnalyzeStack`, its loop over `request.resources` and the links it then sets): each a
    `PolicyResource` with its properties' read-only view, options and provider, linked to its parent and
    dependencies among them."""
    intermediates = []
    for r in request.resources:
        opts = servicer._get_resource_options(r)
        provider = servicer._get_provider_resource(r)
        resource = _StackResource(r, opts, provider)
        property_dependencies = {k: list(v.urns) for k, v in r.propertyDependencies.items()}
        intermediates.append((resource, r.parent, list(r.dependencies), property_dependencies))
    by_urn = {i[0].urn: i[0] for i in intermediates}
    for resource, parent, dependencies, property_dependencies in intermediates:
        if parent is not None and parent in by_urn:
            resource.parent = by_urn[parent]
        resource.dependencies.extend(by_urn[d] for d in dependencies if d in by_urn)
        for k, urns in property_dependencies.items():
            resource.property_dependencies[k] = [by_urn[d] for d in urns if d in by_urn]
    return [i[0] for i in intermediates]


class _StackResource(sdk.PolicyResource):
    """A stack policy's `PolicyResource` whose properties are decoded when a rule first reads them, once: a stack
    policy finds what it checks by type (`kube.pod_makers`, `workloads.of_type`), so the resources no rule reads
    (two in five at 100 models: roles, service accounts, the dashboards' ConfigMaps, the components) stay as the
    request's message. Decoded as the SDK decodes them (`MessageToDict`, then `deserialize_properties`: here both in
    one walk, `deserialized`), read through views made as the rules read them (`_LazyDict`)."""

    def __init__(self, message: Any, opts: Any, provider: Any) -> None:
        self._message: Any = message
        self._props: Any = None
        super().__init__(message.type, None, message.urn, message.name, opts, provider, None, [], {})  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def props(self) -> Any:
        if self._props is None:
            properties = self._message.properties
            if type(properties) is bytes:
                # Read with its properties as bytes (stack_request.py): parsed now, as the SDK's request parses it.
                properties = struct_pb2.Struct.FromString(properties)
            self._props = _lazy_view(deserialized(properties), [])
            self._message = None
        return self._props

    @props.setter
    def props(self, value: Any) -> None:
        self._props = value


def _analyze(self: Any, request: Any, _context: Any) -> Any:
    """pulumi-policy 1.21.0's `_PolicyAnalyzerServicer.Analyze`, what is the same for every resource policy (the
    properties' view, the options, the provider) made once per request, at the first policy that runs, instead of
    once per policy: at 500 models the pack ran twenty resource policies over 18,831 resources, and each time the SDK
    rebuilt the options from the request (`_get_resource_options`) and looked the rest up again. Each policy's level,
    config (a copy each, as the SDK gives), report, and the answers for a value unknown at preview, a policy not
    applicable or one that only remediates, as the SDK's."""
    self._configure_runtime_settings()
    response = sdk.proto.AnalyzeResponse()
    stack_tags = self._PolicyAnalyzerServicer__stack_tags
    shared: tuple[Any, Any, Any] | None = None
    for policy in self._PolicyAnalyzerServicer__policies:
        level = self._get_enforcement_level(policy)
        if level == sdk.EnforcementLevel.DISABLED or not isinstance(policy, sdk.ResourceValidationPolicy):
            continue
        if not policy.has_validation():
            # A remediation policy only: reported as not applicable.
            reason = "Policy does not implement validate"
            response.not_applicable.append(sdk.proto.PolicyNotApplicable(policy_name=policy.name, reason=reason))
            continue
        if level == sdk.EnforcementLevel.REMEDIATE:
            # Still violated after a remediation ran: reported as mandatory.
            level = sdk.EnforcementLevel.MANDATORY
        report_violation = self._create_report_violation(response, policy.name, policy.description, level, policy.severity)
        if shared is None:
            props = sdk.unknown_checking_proxy(deserialized(request.properties))
            shared = props, self._get_resource_options(request), self._get_provider_resource(request)
        props, opts, provider = shared
        config = self._get_policy_config(policy.name)
        args = sdk.ResourceValidationArgs(request.type, props, request.urn, request.name, opts, provider, config, stack_tags)
        _validate(self, policy, args, report_violation, response)
    return response


def _analyze_stack(self: Any, request: Any, _context: Any) -> Any:
    """pulumi-policy 1.21.0's `_PolicyAnalyzerServicer.AnalyzeStack`, the stack's resources built once
    (`_stack_resources`) for every stack policy; each policy's level, config, violations, and the answers for a value
    unknown at preview or a policy not applicable, as the SDK's."""
    self._configure_runtime_settings()
    response = sdk.proto.AnalyzeResponse()
    resources: list[Any] | None = None
    for policy in self._PolicyAnalyzerServicer__policies:
        level = self._get_enforcement_level(policy)
        if level == sdk.EnforcementLevel.DISABLED or not isinstance(policy, sdk.StackValidationPolicy):
            continue
        if level == sdk.EnforcementLevel.REMEDIATE:
            # Stack policies cannot be remediated, so treat the level as mandatory.
            level = sdk.EnforcementLevel.MANDATORY
        report_violation = self._create_report_violation(response, policy.name, policy.description, level, policy.severity)
        if resources is None:
            resources = _stack_resources(self, request)
        config = self._get_policy_config(policy.name)
        args = sdk.StackValidationArgs(resources, config, self._PolicyAnalyzerServicer__stack_tags)
        _validate(self, policy, args, report_violation, response)
    return response


def _validate(self: Any, policy: Any, args: Any, report_violation: Any, response: Any) -> None:
    """One policy run on its args as pulumi-policy 1.21.0's Analyze and AnalyzeStack run it: awaited if it returns an
    awaitable; a value unknown at preview said as an advisory diagnostic, a policy not applicable so noted."""
    name, version = self._PolicyAnalyzerServicer__policy_pack_name, self._PolicyAnalyzerServicer__policy_pack_version
    try:
        result = policy.validate(args, report_violation)
        if sdk.isawaitable(result):
            loop = sdk.asyncio.new_event_loop()
            task: Any = sdk.asyncio.Task(result, loop=loop)  # type: ignore[arg-type]
            loop.run_until_complete(task)
            loop.close()
    except sdk.UnknownValueError as e:
        response.diagnostics.append(
            sdk.proto.AnalyzeDiagnostic(
                policyName=policy.name,
                policyPackName=name,
                policyPackVersion=version,
                message=f"can't run policy '{policy.name}' from policy pack '{name}@v{version}' during preview: {e.message}",
                urn="",
                description=policy.description,
                enforcementLevel=self._map_enforcement_level(sdk.EnforcementLevel.ADVISORY),
            )
        )
    except sdk._NotApplicableError as e:
        response.not_applicable.append(sdk.proto.PolicyNotApplicable(policy_name=policy.name, reason=e.reason or ""))
