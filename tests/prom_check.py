#!/usr/bin/env python3
"""Checks a /metrics text (tests/test_serve.c): it must parse with prometheus_client's text
parser (Debian's python3-prometheus-client, installed by ci/setup.sh), every family must have
a TYPE, no family may appear twice, and every histogram's buckets must be cumulative and end
in +Inf equal to its _count. Prints each problem; exits 1 when there is one.

usage: prom_check.py FILE
"""
import sys

from prometheus_client.parser import text_string_to_metric_families


def main(path):
    text = open(path, encoding="utf-8").read()
    problems = []
    seen = set()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser's own complaint about the text
        print(f"prom_check: {path}: does not parse: {e}")
        return 1
    typed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    for f in families:
        if f.name in seen:
            problems.append(f"{f.name}: appears twice")
        seen.add(f.name)
        if f.type == "unknown" or (f.name not in typed and f.name + "_total" not in typed):
            problems.append(f"{f.name}: no TYPE")
        if f.type != "histogram":
            continue
        series = {}
        for s in f.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            h = series.setdefault(labels, {"buckets": [], "count": None, "sum": None})
            if s.name.endswith("_bucket"):
                h["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                h["count"] = s.value
            elif s.name.endswith("_sum"):
                h["sum"] = s.value
        for labels, h in series.items():
            b = h["buckets"]
            if not b or b[-1][0] != float("inf"):
                problems.append(f"{f.name}{dict(labels)}: no +Inf bucket")
                continue
            if [x for x, _ in b] != sorted(x for x, _ in b):
                problems.append(f"{f.name}{dict(labels)}: bounds out of order")
            if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
                problems.append(f"{f.name}{dict(labels)}: buckets not cumulative")
            if h["count"] is None or h["sum"] is None or b[-1][1] != h["count"]:
                problems.append(f"{f.name}{dict(labels)}: +Inf {b[-1][1]} != count {h['count']}")
    for p in problems:
        print(f"prom_check: {path}: {p}")
    print(f"prom_check: {len(families)} families, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
