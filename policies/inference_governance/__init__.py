"""Validators of the inference-governance policy pack: pure functions over resource properties.

Every resource validator takes `(args, report_violation)` and checks `args.resource_type`
(Kubernetes tokens are `kubernetes:<group>/<version>:<Kind>`, custom resources included);
every stack validator takes `(args, report_violation)` over `args.resources`.

One module per domain (gpu_placement, gpu_quotas, latency, disruption, autoscaling, canary_routes, canary,
serving_performance, adapters, gateway_auth, control_plane, endpoint_pickers, tenant_egress, tenant_s3, images,
pod_security, credentials, shell_scripts, kueue, monitoring); what several share is in kube.py (reading Kubernetes
objects, the pack's config), workloads.py (the stack's workloads and pools), budgets.py (PodDisruptionBudgets) and
tenant_data.py (tenants' S3 prefixes and roles). pack.py declares the policies (name, level, severity, config
schema, validator) that `policies/__main__.py` serves.
"""
