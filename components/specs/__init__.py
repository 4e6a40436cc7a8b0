"""Pure builders of Kubernetes and custom-resource specs from the typed config.

No Pulumi resources are created here: components call these and register the results, tests
and the policy pack's fixtures call them directly.
"""
