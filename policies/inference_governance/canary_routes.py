"""Canary routes: a VirtualService's weights add up to 100, version-override routes come first, and every subset it
sends to exists."""

from __future__ import annotations

from typing import Any

from .kube import (
    DEFAULT_OVERRIDE_HEADER,
    DESTINATION_RULE,
    OVERRIDE_HEADER_ANNOTATION,
    VIRTUAL_SERVICE,
    Report,
    config,
    fqdn,
    get,
    name_of,
    namespace_of,
)
from .workloads import of_type


def canary_routes(args: Any, report_violation: Report) -> None:
    settings = config(args)
    default_headers = set(settings.get("overrideHeaders", [DEFAULT_OVERRIDE_HEADER]))
    subsets = {
        (fqdn(get(rule.props, "spec", "host", default=""), namespace_of(rule.props)), get(s, "name"))
        for rule in of_type(args, DESTINATION_RULE)
        for s in get(rule.props, "spec", "subsets", default=[])
    }
    for service in of_type(args, VIRTUAL_SERVICE):
        namespace = namespace_of(service.props)
        declared = get(service.props, "metadata", "annotations", OVERRIDE_HEADER_ANNOTATION)
        override_headers = default_headers | ({declared} if declared else set())
        where = f"VirtualService {namespace}/{name_of(service.props)}"
        routes = get(service.props, "spec", "http", default=[])
        kinds = []
        for index, route in enumerate(routes):
            matches = get(route, "match", default=[])
            overriding = bool(matches) and all(override_headers & set(get(m, "headers", default={})) for m in matches)
            kinds.append(overriding)
            destinations = get(route, "route", default=[])
            if len(destinations) > 1 or any("weight" in d for d in destinations):
                total = sum(get(d, "weight", default=0) for d in destinations)
                if total != 100:
                    report_violation(
                        f"{where} route {index} ('{get(route, 'name', default='')}') weights add up to {total}, not 100",
                        service.urn,
                    )
            for d in destinations:
                host, subset = get(d, "destination", "host", default=""), get(d, "destination", "subset")
                if subset is not None and (fqdn(host, namespace), subset) not in subsets:
                    report_violation(
                        f"{where} route {index} sends to subset '{subset}' of {host}, which no DestinationRule defines",
                        service.urn,
                    )
        if True in kinds and False in kinds:
            last_override = len(kinds) - 1 - kinds[::-1].index(True)
            if kinds.index(False) < last_override:
                report_violation(
                    f"{where}: version-override route {last_override} comes after another route; override routes must come first",
                    service.urn,
                )
