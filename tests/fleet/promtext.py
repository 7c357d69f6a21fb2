"""A strict reader of the Prometheus text format 0.0.4, enough to check /metrics."""

from __future__ import annotations

import re

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? (-?(?:[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?|\+Inf|-Inf|NaN))$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_SUFFIXES = {"summary": ("_sum", "_count", ""), "histogram": ("_sum", "_count", "_bucket")}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """(family name -> type, (sample name, labels) -> value); raises AssertionError on any
    line that is not valid exposition format or a sample without a declared family."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    types: dict[str, str] = {}
    samples: Samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "summary", "histogram", "untyped"), line
            assert name not in types, f"TYPE declared twice: {line}"
            types[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        family = next((f for f in types if name == f or any(name == f + s for s in _SUFFIXES.get(types[f], ()))), None)
        assert family is not None, f"sample {name} has no TYPE line before it"
        key = (name, frozenset(_PAIR.findall(labels or "")))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]
