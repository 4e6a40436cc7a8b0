"""`AnalyzeStack`'s request read with each resource's properties left as their wire bytes.

The request holds the whole stack: at 1,000 models 44,000 resources, 90 MB on the wire. protobuf 5.29.6 (upb) makes
a `Struct` of every resource's properties as it parses the request, about four times their wire size (194 MiB for the
45 MiB of 500 models' properties, measured), before any policy reads one; two in five no stack policy ever reads
(decoding.py `_StackResource`). Parsed by `StackRequest`, the same message (pulumi 3.272.0 `pulumi/analyzer.proto`
`AnalyzeStackRequest`, its `AnalyzerResource`) with field 2, `properties`, declared `bytes` (a message field and a
bytes field are the same on the wire: the field's length, then its bytes), a resource's properties are parsed as a
`Struct` when a rule first reads them, and dropped once decoded.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

ANALYZE_STACK = "/pulumirpc.Analyzer/AnalyzeStack"
_PACKAGE = "inference_governance.stack_request"
_RESOURCE = ".pulumirpc.AnalyzerResource"
_PROPERTIES_FIELD = 2


def _request_file() -> descriptor_pb2.FileDescriptorProto:
    """A file of two messages: `AnalyzeStackRequest` and `AnalyzerResource` as analyzer.proto declares them, but for
    the resource's properties, bytes; every other type they name (options, provider, property dependencies) is
    analyzer.proto's own."""
    source = descriptor_pb2.FileDescriptorProto()
    analyzer_pb2.DESCRIPTOR.CopyToProto(source)
    messages = {m.name: m for m in source.message_type}
    resource, request = descriptor_pb2.DescriptorProto(), descriptor_pb2.DescriptorProto()
    resource.CopyFrom(messages["AnalyzerResource"])
    request.CopyFrom(messages["AnalyzeStackRequest"])
    for message in (resource, *resource.nested_type, request):
        for field in message.field:
            if field.type_name == _RESOURCE or field.type_name.startswith(_RESOURCE + "."):
                field.type_name = f".{_PACKAGE}.AnalyzerResource" + field.type_name[len(_RESOURCE) :]
    (properties,) = (f for f in resource.field if f.number == _PROPERTIES_FIELD)
    if properties.type_name != ".google.protobuf.Struct":
        raise RuntimeError(f"analyzer.proto's AnalyzerResource field 2 is {properties.type_name}, not a Struct")
    properties.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    properties.ClearField("type_name")
    return descriptor_pb2.FileDescriptorProto(
        name="inference_governance/stack_request.proto",
        package=_PACKAGE,
        syntax=source.syntax,
        dependency=[source.name],
        message_type=[resource, request],
    )


def _request_class() -> Any:
    pool = descriptor_pool.Default()
    try:
        described = pool.FindFileByName("inference_governance/stack_request.proto")
    except KeyError:
        described = pool.Add(_request_file())
    return message_factory.GetMessageClass(described.message_types_by_name["AnalyzeStackRequest"])


StackRequest = _request_class()


class _StackRequestsAsBytes(grpc.GenericRpcHandler):
    """The analyzer service's handlers as the SDK registers them, `AnalyzeStack`'s reading its request as a
    `StackRequest`."""

    def __init__(self, handler: grpc.GenericRpcHandler) -> None:
        self._handler = handler

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = self._handler.service(handler_call_details)
        if handler is None or handler_call_details.method != ANALYZE_STACK:
            return handler
        return handler._replace(request_deserializer=StackRequest.FromString)


class _Registering:
    """The server, as the generated `add_AnalyzerServicer_to_server` sees it: the handlers it adds are wrapped."""

    def __init__(self, server: grpc.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(tuple(_StackRequestsAsBytes(h) for h in handlers))


_SDK_ADD = analyzer_pb2_grpc.add_AnalyzerServicer_to_server


def _add_analyzer_servicer(servicer: Any, server: grpc.Server) -> None:
    _SDK_ADD(servicer, _Registering(server))


def read_stack_properties_as_bytes() -> None:
    """The pack's server (pulumi-policy 1.21.0 `policy.py` `PolicyPack._serve` calls the generated
    `analyzer_pb2_grpc.add_AnalyzerServicer_to_server`) reads `AnalyzeStack`'s requests as `StackRequest`s."""
    setattr(analyzer_pb2_grpc, "add_AnalyzerServicer_to_server", _add_analyzer_servicer)
