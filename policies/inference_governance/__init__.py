"""Validators of the inference-governance policy pack: pure functions over resource properties.

Every resource validator takes `(args, report_violation)` and checks `args.resource_type`
(Kubernetes tokens are `kubernetes:<group>/<version>:<Kind>`, custom resources included);
every stack validator takes `(args, report_violation)` over `args.resources`.
"""
