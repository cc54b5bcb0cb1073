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
    elif name == "lexical/floe_next_id":
        ratio = f"{rate / 10e6:.2f}x the 10 M/s target"
    else:
        ratio = ""
    print(f"| {name} | {ns:.2f} | {rate / 1e6:.3f} M | {ratio} |")
