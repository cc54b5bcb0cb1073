#!/usr/bin/env python3
"""Prints the medians of the last `cargo bench -p floe-bench` run as a Markdown table.

Reads Criterion's estimates under target/criterion; the throughput figures are the batch
size over the median time per batch.
"""
import glob
import json
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"
rows = {}
for path in glob.glob(os.path.join(root, "**", "new", "estimates.json"), recursive=True):
    est = json.load(open(path))
    bench = json.load(open(path.replace("estimates.json", "benchmark.json")))
    elements = (bench.get("throughput") or {}).get("Elements", 1)
    ns_per_id = est["median"]["point_estimate"] / elements
    rows[bench["full_id"]] = ns_per_id

CAPS = {"snowflake_saturated": 4_096_000, "sno_saturated": 16_384_000}
print("| benchmark | median ns/ID | IDs/s | ratio |")
print("|---|---:|---:|---|")
for name in sorted(rows):
    ns = rows[name]
    rate = 1e9 / ns
    group = name.split("/")[0]
    if group in CAPS:
        ratio = f"{rate / CAPS[group]:.4f} of the cap"
    elif group == "snowflake_cost" and name.endswith("floe_unsaturated"):
        clock = rows.get("snowflake_cost/system_clock_read")
        ratio = f"clock read + {ns - clock:.1f} ns" if clock else ""
    elif group in ("uuid7", "ulid_monotonic", "ulid_random") and name.endswith("/floe"):
        peers = [v for k, v in rows.items() if k.startswith(group + "/") and k != name]
        ratio = f"{ns / peers[0]:.3f}x the crate called directly" if peers else ""
    elif name == "sno_codec/decode":
        ratio = f"Go sno: about 8 ns; harness alone {rows.get('sno_codec/from_slice_baseline', 0):.1f} ns"
    elif name == "sno_codec/encode":
        ratio = "Go sno: about 20 ns"
    elif group == "weak_warm" and not name.startswith("weak_warm/atomic"):
        threads = name.rsplit("/", 1)[1]
        base = rows.get(f"weak_warm/atomic_fetch_add/{threads}")
        one = rows.get(name.rsplit("/", 1)[0] + "/1")
        ratio = f"{base / ns:.2f}x the speed of fetch_add on {threads} thread(s)" if base else ""
        if threads == "2" and one:
            ratio += f"; {one / ns:.2f}x its own 1-thread rate"
    elif group.startswith("strong_") and "/floe/" in name:
        raw = rows.get(name.replace("/floe/", "/raw/"))
        ratio = f"{raw / ns:.2f}x the rate of the raw operation" if raw else ""
    elif name == "lexical/floe_next_id":
        ratio = f"{rate / 10e6:.2f}x the 10 M/s target"
    else:
        ratio = ""
    print(f"| {name} | {ns:.2f} | {rate / 1e6:.3f} M | {ratio} |")

latency = sorted(glob.glob(os.path.join(root, "segment_latency", "*.json")))
if latency:
    print()
    print("| store | segment fetch p50 | p99 | samples |")
    print("|---|---:|---:|---:|")
    for path in latency:
        r = json.load(open(path))
        print(f"| {r['store']} | {r['p50_us']:.0f} µs | {r['p99_us']:.0f} µs | {r['samples']} |")
