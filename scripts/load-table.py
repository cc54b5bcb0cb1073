#!/usr/bin/env python3
"""The table of scripts/load.sh: medians of its runs (results.tsv), p99 and ratios.

Each row of results.tsv: measurement, target, round, requests/s, p99 (ms), failed requests, the
server's CPU time per request (µs).
"""
import statistics
import sys
from collections import defaultdict

SNOWFLAKE_CAP = 4_096_000  # Leaf's 41/10/12 layout: 4,096 IDs per ms per worker
LEAF_PUBLISHED = 50_000  # Leaf's published segment throughput (4 cores)


def main(path):
    runs = defaultdict(list)
    order = []
    for line in open(path):
        m, target, _round, rps, p99, failed, cpu = line.rstrip("\n").split("\t")
        if (m, target) not in runs:
            order.append((m, target))
        runs[(m, target)].append((float(rps or 0), float(p99 or 0), int(failed or 0), float(cpu or 0)))

    def med(m, target):
        rs = runs[(m, target)]
        return (
            statistics.median(r[0] for r in rs),
            statistics.median(r[1] for r in rs),
            sum(r[2] for r in rs),
            len(rs),
            min(r[0] for r in rs),
            max(r[0] for r in rs),
            statistics.median(r[3] for r in rs),
        )

    print("| measurement | target | runs | req/s (median) | min–max | p99 ms (median) | server CPU µs/req | failed | ratio / goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m, target in order:
        rps, p99, failed, n, lo, hi, cpu = med(m, target)
        note = ""
        if m.startswith("grpc GetNextId") and target == "floe" and (m, "noop") in runs:
            note = f"{rps / med(m, 'noop')[0]:.2f}x of no-op (goal 0.95x)"
        elif m == "http" and target != "healthz":
            note = f"{rps / med(m, 'healthz')[0]:.2f}x of /healthz (goal 0.95x)"
            if target == "leaf-segment":
                note += f"; {rps / LEAF_PUBLISHED:.2f}x Leaf's 50k/s"
        elif m.startswith("batch"):
            ids = rps * 1000
            if "snowflake" in m:
                goal = f"{ids / SNOWFLAKE_CAP:.2f}x of the layout's cap 4.096 M/s"
            elif "grpc" in m:
                goal = f"{ids / 10e6:.2f}x of 10 M/s"
            else:
                goal = f"{ids / 5e6:.2f}x of 5 M/s"
            note = f"{ids / 1e6:.2f} M IDs/s: {goal}"
        label = {"healthz": "/healthz", "sequencer": "/v1/sequencer/default/k",
                 "leaf-segment": "/api/segment/get/k", "leaf-snowflake": "/api/snowflake/get/k"}.get(target, target)
        print(f"| {m} | {label} | {n} | {rps:,.0f} | {lo:,.0f}–{hi:,.0f} | {p99:.2f} | {cpu:.2f} | {failed} | {note} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/load/results.tsv")
