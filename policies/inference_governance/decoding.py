"""Each resource decoded once per analyzer request, not once per policy.

pulumi-policy 1.21.0 (`pulumi_policy/policy.py`, `_PolicyAnalyzerServicer`) turns a resource's
properties into Python values (`json_format.MessageToDict`, then `deserialize_properties`) inside
its loop over the policies: `AnalyzeStack` decodes the whole stack once per stack policy, `Analyze`
a resource once per resource policy, and both decode the resource's provider once per policy
(`_get_provider_resource`), and each time copies the result into a read-only view
(`unknown_checking_proxy`). The values are the same every time, and the rules only read them, so
one decoding and one view per request serve them all.

`decode_once()` makes the servicer's two calls remember, for the length of one `Analyze` or
`AnalyzeStack` call on its thread, what they returned for each message (by identity; the message
is kept, so its id cannot be reused meanwhile). Outside those calls (configuration, remediation)
they are the SDK's own. `POLICY_PACK_DECODE_EACH=1` leaves the SDK as it is, for the benchmark's
comparison (`benchmarks/bench_preview.py`).
"""

from __future__ import annotations

import functools
import os
import threading
from types import SimpleNamespace
from typing import Any, Callable

import pulumi_policy.policy as sdk

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

    return call


def _one_request(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, request: Any, context: Any) -> Any:
        _requests.tables = {"messages": {}, "values": {}, "proxies": {}}
        try:
            return method(self, request, context)
        finally:
            _requests.tables = None

    return call


def decode_once() -> None:
    """Patch the SDK's servicer to decode each message once per request (see the module's docstring)."""
    if os.environ.get("POLICY_PACK_DECODE_EACH") == "1" or getattr(sdk, "_decodes_once", False):
        return
    json_format = sdk.json_format
    sdk.json_format = SimpleNamespace(
        **{name: getattr(json_format, name) for name in dir(json_format) if not name.startswith("__")},
    )
    sdk.json_format.MessageToDict = _remembered(json_format.MessageToDict, "messages")
    sdk.deserialize_properties = _remembered(sdk.deserialize_properties, "values")
    # The read-only view is a whole copy of the value too (`pulumi_policy/proxy.py` _proxy_helper walks it
    # eagerly), so it is shared as well; the rules only read it.
    sdk.unknown_checking_proxy = _remembered(sdk.unknown_checking_proxy, "proxies")
    servicer = sdk._PolicyAnalyzerServicer
    setattr(servicer, "Analyze", _one_request(servicer.Analyze))
    setattr(servicer, "AnalyzeStack", _one_request(servicer.AnalyzeStack))
    setattr(sdk, "_decodes_once", True)
