"""The inference-governance policy pack: what CI enforces on every stack of the platform."""

import gc

from inference_governance.decoding import decode_once
from inference_governance.pack import ENFORCEMENT_LEVEL, NAME, POLICIES
from inference_governance.runtime_settings import read_environment_once
from pulumi_policy import PolicyPack

# The policy SDK turns every resource it is sent into Python objects, once per policy unless
# decode_once() makes that once per request, and keeps few of them: with CPython's default
# thresholds the collector rescans the heap over and over.
gc.set_threshold(50_000, 50, 1_000)
decode_once()
# The settings each analyzer call applies, from the environment read once (runtime_settings.py).
read_environment_once()

PolicyPack(name=NAME, enforcement_level=ENFORCEMENT_LEVEL, policies=POLICIES)
