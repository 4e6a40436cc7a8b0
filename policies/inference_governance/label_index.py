"""Label indexes, so that a rule matching selectors against pods' labels costs in proportion to the stack, not to its
square when many models share a namespace: the candidates a selector may select (`LabelIndex`), and the selectors
that may select some labels (`SelectorIndex`). Both give a superset of the matches, in the order the items came:
the rule still applies its own match (kube.labels_match, kube.selector_matches) to each candidate."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

T = TypeVar("T")


def _pairs(labels: Any) -> list[tuple[str, str]] | None:
    """A mapping's (key, value) pairs, or None where it is no mapping of strings (such an item is then a candidate
    for everything: only the rule's own match can tell)."""
    if not isinstance(labels, Mapping):
        return None
    pairs = list(labels.items())
    return pairs if all(isinstance(k, str) and isinstance(v, str) for k, v in pairs) else None


class LabelIndex(Generic[T]):
    """Items (pods' owners) by namespace and by each label their pods carry."""

    def __init__(self, items: Iterable[T], namespace: Callable[[T], Any], labels: Callable[[T], Any]):
        self._order: dict[int, int] = {}
        self._by_namespace: dict[Any, list[T]] = defaultdict(list)
        self._by_label: dict[tuple[Any, str, str], list[T]] = defaultdict(list)
        self._unindexed: dict[Any, list[T]] = defaultdict(list)
        for index, item in enumerate(items):
            self._order[id(item)] = index
            where = namespace(item)
            self._by_namespace[where].append(item)
            pairs = _pairs(labels(item))
            if pairs is None:
                self._unindexed[where].append(item)
                continue
            for key, value in pairs:
                self._by_label[(where, key, value)].append(item)

    def candidates(self, namespace: Any, match_labels: Any) -> list[T]:
        """The items of `namespace` whose labels may hold every one of `match_labels` (all of the namespace's where
        it holds none, or is no mapping of strings)."""
        pairs = _pairs(match_labels)
        if not pairs:
            return self._by_namespace.get(namespace, [])
        fewest = min((self._by_label.get((namespace, key, value), []) for key, value in pairs), key=len)
        unindexed = self._unindexed.get(namespace, [])
        if not unindexed:
            return fewest
        return sorted([*fewest, *unindexed], key=lambda item: self._order[id(item)])


class SelectorIndex(Generic[T]):
    """Label selectors (metav1.LabelSelector: matchLabels and matchExpressions) by namespace, each under the one of
    its matchLabels that the fewest selectors hold: those a pod's labels may satisfy are found from its labels."""

    def __init__(self, selectors: Iterable[tuple[Any, T]], match_labels: Callable[[T], Any]):
        entries = [(namespace, selector, _pairs(match_labels(selector))) for namespace, selector in selectors]
        counts = Counter((namespace, pair) for namespace, _, pairs in entries for pair in pairs or ())
        self._order: list[tuple[Any, T]] = []
        self._by_label: dict[tuple[Any, str, str], list[int]] = defaultdict(list)
        self._everywhere: dict[Any, list[int]] = defaultdict(list)
        for index, (namespace, selector, pairs) in enumerate(entries):
            self._order.append((namespace, selector))
            if not pairs:
                self._everywhere[namespace].append(index)
                continue
            key, value = min(pairs, key=lambda pair: counts[(namespace, pair)])
            self._by_label[(namespace, key, value)].append(index)

    def candidates(self, namespace: Any, labels: Mapping[str, Any]) -> list[T]:
        """The selectors of `namespace` that may select pods with these labels."""
        found = list(self._everywhere.get(namespace, []))
        for key, value in labels.items():
            if isinstance(value, str):
                found += self._by_label.get((namespace, key, value), [])
        return [self._order[index][1] for index in sorted(set(found))]
