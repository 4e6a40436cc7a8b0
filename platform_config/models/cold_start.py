"""How long adding a replica may take, and the weight mirror the tenants' pods read Hugging Face revisions from."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import ConfigModel, Duration, PositiveQuantity, _duration_between, _full_match


class ColdStartConfig(ConfigModel):
    """How long adding a replica may take, and the figures of its expected cold start besides the pool's weight cache
    (`nodePools[].weightCache`)."""

    scale_up_budget: Annotated[Duration, _duration_between(30, 3600)] = "5m"
    """How long a latency-sensitive model may take to add a replica: a model whose expected cold start (image,
    weights, engine start) is longer must keep a warm minimum (`minReplicas` > 0)."""
    engine_start_seconds: Annotated[int, Field(ge=1, le=3600)] = 90
    """Seconds vLLM takes from weights on local disk to serving (loading them into GPU memory, profiling, CUDA graph
    capture and compilation): an assumption for vLLM 0.33 with empty compile caches; measure it and set it."""
    image_size: PositiveQuantity = "10Gi"
    """Compressed size of the vLLM image a new node pulls (the `vllm/vllm-openai` amd64 image is about 10 GiB): the
    image part of a cold start on a node that has not pulled it yet."""
    image_unpack_mbps: Annotated[int, Field(ge=10, le=10000)] = 150
    """MB/s containerd unpacks the image's layers at (one layer at a time, gzip in one thread): an assumption; an image
    pull takes its size over the slower of this and the download."""


class S3GatewayEndpoint(ConfigModel):
    """An S3 gateway VPC endpoint the platform creates, so that streaming and mirroring reach S3 inside the Region
    without the NAT or internet gateway (and its per-flow and half-bandwidth limits)."""

    route_table_ids: Annotated[
        list[Annotated[str, _full_match(r"rtb-[0-9a-f]{8,17}", "is not a route table ID (rtb-...)")]], Field(min_length=1)
    ]
    """The route tables of the nodes' subnets (in the cluster's VPC). Leave `s3GatewayEndpoint` out where the VPC
    already has an S3 gateway endpoint on them: AWS refuses a second one for the same route table."""


class WeightMirrorConfig(ConfigModel):
    """An S3 bucket that holds a copy of every Hugging Face revision a tenant's pods read (servers' weights, LoRA
    adapters, batch jobs' models), written once per revision by a Job in the platform's `model-weights` namespace
    before any pod reading it starts; the servers stream from the copy, or copy it onto their node's cache, and the
    adapters' fetchers and batch jobs copy it (README, Cold start), so no tenant's pod downloads from Hugging Face.
    Needs `cluster.mode: eks` (the Job and the pods get their S3 roles through the cluster's workload identity);
    required in production for any Hugging Face source. Where it is set, pools without a `weightCache.medium` stream
    (`s3Stream`)."""

    bucket: Annotated[
        str,
        _full_match(
            r"(?!xn--)(?!.*-s3alias$)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]",
            "is not an S3 bucket name (3-63 lowercase letters, digits and hyphens; no dots, so TLS names match)",
        ),
    ]
    """The bucket's name. Each tenant's copies are under `<bucket>/<tenant>/`; a tenant's pods read only their
    own prefix, and the mirror's role for a tenant writes only there."""
    create: bool = True
    """Create the bucket (private, owner-enforced, TLS-only); `false`: it exists already."""
    s3_gateway_endpoint: S3GatewayEndpoint | None = None
    """The S3 gateway endpoint to create on the nodes' route tables, if the VPC has none."""
