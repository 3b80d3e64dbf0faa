"""Label and field selectors, parsed once and matched against objects as the API server does."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class SelectorError(ValueError):
    """A selector that does not parse (the store answers 400 BadRequest)."""


_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY_RE = re.compile(rf"^{_KEY}$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SET_ONLY_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*([^\s,]*)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the key, as the API server does.
        return not present or labels[self.key] not in self.values


def _split_top_level(selector: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b` has two terms)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in (s.strip() for s in parts) if p]


def _bad_label(term: str, why: str) -> SelectorError:
    return SelectorError(f"unable to parse requirement: {why}: {term!r}")


def parse_label_selector(selector: str | None) -> tuple[Requirement, ...]:
    """Parse a label selector string; raises SelectorError when it does not parse."""
    if not selector or not selector.strip():
        return ()
    reqs: list[Requirement] = []
    for term in _split_top_level(selector):
        m = _SET_ONLY_RE.match(term)
        if m:
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            for v in values:
                if not _VALUE_RE.match(v):
                    raise _bad_label(term, f"invalid label value {v!r}")
            reqs.append(Requirement(m.group(1), m.group(2), values))
            continue
        m = _EQ_RE.match(term)
        if m:
            key, op, value = m.group(1), m.group(2), m.group(3)
            if not _VALUE_RE.match(value) or len(value) > 63:
                raise _bad_label(term, f"invalid label value {value!r}")
            reqs.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
            continue
        bare = term.strip()
        negated = bare.startswith("!")
        key = bare[1:].strip() if negated else bare
        if not _KEY_RE.match(key):
            raise _bad_label(term, "invalid label key")
        reqs.append(Requirement(key, "!" if negated else "exists"))
    return tuple(reqs)


def labels_match(reqs: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


FIELD_PATHS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": lambda o: str((o.get("metadata") or {}).get("name", "")),
    "metadata.namespace": lambda o: str((o.get("metadata") or {}).get("namespace", "")),
}


FieldPaths = Mapping[str, Callable[[Mapping[str, Any]], str]]


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    negated: bool
    value: str
    read: Callable[[Mapping[str, Any]], str] = field(default=FIELD_PATHS["metadata.name"], compare=False)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (self.read(obj) == self.value) != self.negated


def parse_field_selector(
    selector: str | None, paths: FieldPaths | None = None
) -> tuple[FieldRequirement, ...]:
    """Parse a field selector: metadata.name and metadata.namespace, and a type's own fields
    (`paths`, e.g. an Event's `reason`); any other field is refused, as the API server does."""
    paths = FIELD_PATHS if paths is None else {**FIELD_PATHS, **paths}
    if not selector or not selector.strip():
        return ()
    reqs: list[FieldRequirement] = []
    for term in _split_top_level(selector):
        m = re.match(r"^\s*([^=!\s]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not m:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term}'")
        path, op, value = m.groups()
        if path not in paths:
            raise SelectorError(f"field label not supported: {path}")
        reqs.append(FieldRequirement(path, op == "!=", value, paths[path]))
    return tuple(reqs)


def fields_match(reqs: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    return all(r.matches(obj) for r in reqs)


@dataclass(frozen=True)
class Selector:
    """A parsed label and field selector pair."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(
        cls, label_selector: str | None, field_selector: str | None, paths: FieldPaths | None = None
    ) -> Selector:
        return cls(parse_label_selector(label_selector), parse_field_selector(field_selector, paths))

    @property
    def empty(self) -> bool:
        return not self.labels and not self.fields

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return labels_match(self.labels, obj) and fields_match(self.fields, obj)
