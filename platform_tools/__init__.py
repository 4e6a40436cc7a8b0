"""Operator commands for a running platform: `python -m platform_tools <command>`."""
