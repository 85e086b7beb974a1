"""How busy ctx.imap keeps 64 slots when records differ in length: the window's share.

A simulated run: each record is a chain of calls one after another (a persona slot's bio
attempts and redraws), most records 1-3 calls, 5 % a chain of 12; a call holds one of 64 slots
for ``--latency`` seconds. Records go through :func:`gen.engine.schedule.ordered` as ``ctx.imap``
sends
them (workers twice the width), with the window at 4x and 16x the width. A long record holds
the ones after it until it ends; the window is what the others fill the slots with meanwhile.

    python bench/schedule_window.py [--records 1500] [--latency 0.4] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import threading
import time
from pathlib import Path

from gen.engine.schedule import ordered

SLOTS = 64


def measure(chains: list[int], latency: float, workers: int, window: int) -> dict[str, float]:
    slots = threading.BoundedSemaphore(SLOTS)
    lock = threading.Lock()
    st = {"n": 0, "area": 0.0, "at": time.monotonic()}

    def tick(d: int) -> None:
        now = time.monotonic()
        with lock:
            st["area"] += st["n"] * (now - st["at"])
            st["at"] = now
            st["n"] += d

    def record(i: int) -> int:
        for _ in range(chains[i]):
            with slots:
                tick(1)
                time.sleep(latency)
                tick(-1)
        return i

    t0 = st["at"] = time.monotonic()
    for _ in ordered(record, range(len(chains)), workers=workers, window=window):
        pass
    span = time.monotonic() - t0
    mean = st["area"] / span
    return {
        "workers": workers,
        "window": window,
        "span_s": round(span, 2),
        "shortest_possible_s": round(sum(chains) * latency / SLOTS, 2),
        "mean_in_flight": round(mean, 1),
        "busy": round(mean / SLOTS, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--latency", type=float, default=0.4)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(1)
    chains = [12 if rng.random() < 0.05 else rng.choice([1, 1, 2, 3]) for _ in range(args.records)]
    rows = [measure(chains, args.latency, 2 * SLOTS, k * SLOTS) for k in (4, 16)]
    for r in rows:
        print(json.dumps(r), flush=True)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": f"{platform.machine()}, {os.cpu_count()} "
                    f"cores, {platform.platform()}",
                    "date": dt.date.today().isoformat(),
                    "slots": SLOTS,
                    "records": args.records,
                    "calls": sum(chains),
                    "latency_s": args.latency,
                    "runs": rows,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
