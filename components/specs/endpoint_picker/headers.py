"""The request and response headers the EPP and its Envoy act on, which the gateway strips from a
client's request, sets on the way (the objective, the flow) and answers by (the dropped reason). LR,
SA and IS name the upstream sources the package's docstring cites."""

from __future__ import annotations

from platform_config.serving import EPP_HEADER_PREFIXES

# The request header naming the InferenceObjective whose priority a request gets (LR
# pkg/epp/metadata/consts.go ObjectiveKey), and the response header the EPP sets when flow
# control drops a request (LR pkg/common/error/error.go RequestDroppedReasonHeaderKey).
OBJECTIVE_HEADER = "x-llm-d-inference-objective"
DROPPED_REASON_HEADER = "x-llm-d-request-dropped-reason"
# The header the EPP answers with the chosen pod's IP:port, which Envoy routes on (consts.go
# DestinationEndpointKey; SA original_dst_lb_config http_header_name).
DESTINATION_HEADER = "x-gateway-destination-endpoint"
# The flow a request joins within its priority band (consts.go FlowFairnessIDKey); the gateway
# filter sets it from the verified caller.
FAIRNESS_HEADER = "x-llm-d-inference-fairness-id"
# Every request header the EPP or its Envoy acts on, from LR pkg/epp/metadata/consts.go at
# v0.10.0 (current names and their deprecated aliases). A client must never set one: the gateway
# strips every one of them (the tests hold this list to every header of consts.go under
# EPP_CONTROL_HEADER_PREFIXES) before the routes set the objective and the filter the flow.
EPP_CONTROL_HEADERS: tuple[str, ...] = (
    DESTINATION_HEADER,  # DestinationEndpointKey: where Envoy sends the request
    "x-gateway-destination-endpoint-subset",  # SubsetFilterKey
    FAIRNESS_HEADER,  # FlowFairnessIDKey
    "x-gateway-inference-fairness-id",  # OldFlowFairnessIDKey
    OBJECTIVE_HEADER,  # ObjectiveKey: the request's priority
    "x-gateway-inference-objective",  # OldObjectiveKey
    "x-llm-d-model-name-rewrite",  # ModelNameRewriteKey: the model the request is sent as
    "x-gateway-model-name-rewrite",  # OldModelNameRewriteKey
    "x-llm-d-slo-ttft-ms",  # TTFTSLOHeaderKey
    "x-slo-ttft-ms",  # OldTTFTSLOHeaderKey
    "x-llm-d-slo-tpot-ms",  # TPOTSLOHeaderKey
    "x-slo-tpot-ms",  # OldTPOTSLOHeaderKey
    "x-llm-d-video-fps",  # VideoFPSHeaderKey
    "x-llm-d-video-duration-seconds",  # VideoDurationHeaderKey
    "x-llm-d-video-resolution",  # VideoResolutionHeaderKey
)
# Prefixes covering every one of them: the deprecated SLO aliases are `x-slo-*`.
EPP_CONTROL_HEADER_PREFIXES = EPP_HEADER_PREFIXES
