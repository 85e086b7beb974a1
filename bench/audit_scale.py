"""How ``audit`` scales: wall time and peak RSS on synthetic banks of 30k, 100k and 1M items.

The bank is generated here, deterministically (``--seed``), in both input formats the audit reads
most: a folder of EgoToM CSVs (``egotom_{goal,belief,actions}_shuffled.csv``, EgoToM's exact
columns) and one JSONL of MCQ records shaped like ``tom``'s (visible context and query time;
privileged transition, future narrations, the truths, a summary). Texts have EgoToM's lengths: a
context of ~60 timed narration lines (~600 words), options of 40-90 characters; one to three
items (goal, belief, actions) per clip share its context, as in EgoToM. A few plants give the
checks work: exact duplicate rows (0.1 %), near duplicates (one option reworded, one context
line changed; 0.1 %), answers copied into the context (0.1 %), and goal answers made the longest
option more often than chance (a length tell).

Each configuration runs ``python -m gen audit`` (every check) in its own process under
``/usr/bin/time -v``: wall time, CPU time (the audit's worker processes included) and the peak RSS
of its largest process; ``peak_rss_all_processes_mb`` is the largest sum over the audit and its
workers (``workers=2``: the text check's process and its pool), sampled every half second, pages
the forked workers share with their parent counted in each (an upper bound);
``peak_pss_all_processes_mb`` the largest sum of their proportional sets (each shared page split
among its sharers: what they use together), sampled every five seconds; ``processes`` each one's
peak resident set and when it was first and last seen.
With embeddings, the embedding cache starts empty (``--warm`` keeps it) and MiniLM runs on one
torch thread (``--embedder-threads``): on the shared 2-core VM two threads only contend.
``--code`` runs another checkout's audit (the commit before, for a before/after row).

Run from the repository root (long: the text gates tag every option; use nice; 1M last):
    nice -n 10 python bench/audit_scale.py [--sizes 30000 100000 1000000] [--formats csv jsonl]
        [--embeddings-sizes 30000 100000] [--no-plain] [--workdir /tmp/audit_scale] [--label L]
        [--code /path/to/checkout]
Results are merged into bench/results/audit_scale.json (one row per format, size, embeddings and
label). Targets: 100k items well under 2 GB peak RSS; 1M items completes with bounded memory.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "audit_scale.json"

VERBS = (
    "picks",
    "puts",
    "holds",
    "moves",
    "opens",
    "closes",
    "cleans",
    "cuts",
    "pours",
    "stirs",
    "washes",
    "dries",
    "folds",
    "places",
    "lifts",
    "drops",
    "wipes",
    "turns",
    "pushes",
    "pulls",
    "adjusts",
    "checks",
    "carries",
    "rinses",
    "scrubs",
    "paints",
    "sands",
    "measures",
    "marks",
    "ties",
    "unties",
    "arranges",
    "sorts",
    "plugs",
    "presses",
    "scans",
    "touches",
    "looks at",
    "walks to",
    "reaches for",
)
OBJECTS = (
    "cup",
    "plate",
    "knife",
    "spoon",
    "bowl",
    "pan",
    "pot",
    "lid",
    "towel",
    "sponge",
    "bottle",
    "jar",
    "box",
    "bag",
    "brush",
    "paint container",
    "pottery wheel",
    "sculpting tool",
    "vacuum cleaner",
    "dustpan",
    "trolley",
    "carrier bag",
    "meat packet",
    "juice can",
    "phone",
    "receipt",
    "drawer",
    "cupboard door",
    "chopping board",
    "onion",
    "tomato",
    "carrot",
    "dough",
    "flour bag",
    "measuring tape",
    "wooden plank",
    "saw",
    "hammer",
    "nail",
    "screwdriver",
    "drill",
    "bicycle wheel",
    "tyre",
    "pump",
    "hose",
    "watering can",
    "plant pot",
    "shovel",
    "rake",
    "bucket",
    "mop",
    "window",
    "curtain",
    "laptop",
    "notebook",
    "pen",
    "book",
    "shirt",
    "sock",
    "basket",
    "lamp",
    "kettle",
    "mug",
    "fridge door",
    "egg carton",
    "cheese grater",
)
PLACES = (
    "on the table",
    "on the counter",
    "in the sink",
    "on the floor",
    "in the cupboard",
    "on the shelf",
    "in the drawer",
    "on the stove",
    "in the bag",
    "on the chair",
    "by the window",
    "in the garden",
    "on the workbench",
    "in the trolley",
)
HANDS = ("with his right hand", "with his left hand", "with both hands", "", "", "")
GOALS = (
    "finish",
    "prepare",
    "clean up",
    "repair",
    "organise",
    "cook",
    "assemble",
    "pack",
    "paint",
    "water",
    "sort",
    "store",
    "check",
    "wash",
    "decorate",
    "measure",
    "replace",
    "tidy",
    "set up",
    "put away",
)
BELIEFS = (
    "is ready",
    "needs more cleaning",
    "is almost done",
    "is in the wrong place",
    "is still dirty",
    "has been put away",
    "is not working",
    "needs to be measured again",
    "is full",
    "is empty",
    "will be needed later",
    "is safe to leave",
    "is too heavy to carry alone",
    "has dried",
)
QUESTION = {
    "goal": "What is C's future goal?",
    "belief": "At the end of these actions, what does C most likely believe?",
    "actions": "What will C most likely do next?",
}
CHOICES = {"goal": 3, "belief": 4, "actions": 4}
LETTERS = "abcd"


def narration(rng: random.Random) -> str:
    hand = rng.choice(HANDS)
    return " ".join(
        x
        for x in ("C", rng.choice(VERBS), "the", rng.choice(OBJECTS), rng.choice(PLACES), hand)
        if x
    )


ADJECTIVES = (
    "red",
    "blue",
    "green",
    "small",
    "large",
    "wooden",
    "metal",
    "plastic",
    "glass",
    "old",
    "new",
    "striped",
    "heavy",
    "empty",
    "folded",
    "wet",
    "dry",
    "broken",
    "clean",
    "dusty",
    "round",
    "square",
    "tall",
    "short",
)


def future(rng: random.Random) -> str:
    """A narration of what comes next (privileged): more specific than a context line, as real
    ones are; the same words in another clip's context would be a leak, not the domain's
    phrasing."""
    return (
        f"C {rng.choice(VERBS)} "
        f"the {rng.choice(ADJECTIVES)} {rng.choice(OBJECTS)} {rng.choice(PLACES)} next to "
        f"the {rng.choice(ADJECTIVES)} {rng.choice(OBJECTS)}"
    )


def option(rng: random.Random, q: str) -> str:
    obj, obj2 = rng.choice(OBJECTS), rng.choice(OBJECTS)
    if q == "goal":
        return f"To {rng.choice(GOALS)} the {obj} and the {obj2} {rng.choice(PLACES)}."
    if q == "belief":
        return (
            f"C believes that the {obj} {rng.choice(BELIEFS)} and the {obj2} {rng.choice(BELIEFS)}."
        )
    v1, v2, v3 = rng.sample(VERBS, 3)
    place, other = rng.choice(PLACES), rng.choice(OBJECTS)
    return f"C {v1} the {obj} {place}, {v2} the {obj2}, and {v3} the {other}."


class Clip:
    def __init__(self, rng: random.Random, k: int):
        self.vuid = f"{rng.getrandbits(128):032x}"
        start = rng.randint(0, 400) * 7 + 1
        self.cuid = f"{self.vuid}~pass_{rng.randint(1, 3)}~{start}-{start + rng.randint(40, 120)}"
        self.start = rng.uniform(0, 3000)
        t, lines = 0, []
        for _ in range(max(20, int(rng.gauss(60, 15)))):
            t += rng.randint(0, 9)
            lines.append((t, narration(rng)))
        self.lines = lines
        self.context = "\n".join(f"    {t // 60:02d}m:{t % 60:02d}s | #C {n}" for t, n in lines)
        self.future = [future(rng) for _ in range(rng.randint(3, 8))]
        self.k = k


def item(rng: random.Random, clip: Clip, q: str, tell: bool) -> dict[str, Any]:
    """One item: its options (the truth first), answer index after a shuffle, the truth."""
    n = CHOICES[q]
    opts = list(dict.fromkeys(option(rng, q) for _ in range(n + 2)))[:n]
    while len(opts) < n:
        opts.append(option(rng, q))
    truth = opts[0]
    if tell and q == "goal":  # the length tell: the truth becomes the longest option
        truth = opts[0] = truth[:-1] + f" before {rng.choice(GOALS)}ing the {rng.choice(OBJECTS)}."
    rng.shuffle(opts)
    return {"q": q, "options": opts, "answer": opts.index(truth), "truth": truth}


def generate(n: int, seed: int) -> Iterator[tuple[Clip, dict[str, Any]]]:
    """``n`` items on clips of one to three items each, with the plants (see the module); streamed
    (a duplicate copies one of the last thousand items)."""
    rng = random.Random(seed)
    recent: deque[tuple[Clip, dict[str, Any]]] = deque(maxlen=1000)
    made = 0
    while made < n:
        clip = Clip(rng, 0)
        for q in rng.sample(list(CHOICES), rng.randint(1, 3)):
            if made == n:
                break
            r = rng.random()
            if (
                r < 0.001 and recent
            ):  # an exact duplicate of an earlier item (same clip, context, options)
                made += 1
                yield recent[rng.randrange(len(recent))]
                continue
            it = item(rng, clip, q, tell=rng.random() < 0.08)
            if 0.001 <= r < 0.002:  # the answer copied into the context
                it["leak"] = True
            made += 1
            recent.append((clip, it))
            yield clip, it
            if (
                0.002 <= r < 0.003 and made < n
            ):  # a near duplicate: one option reworded, one line changed
                twin = Clip.__new__(Clip)
                twin.__dict__.update(clip.__dict__)
                twin.cuid = clip.cuid + "b"
                lines = list(clip.context.split("\n"))
                lines[len(lines) // 2] = lines[len(lines) // 2].replace(" the ", " a ", 1)
                twin.context = "\n".join(lines)
                opts = list(it["options"])
                j = (it["answer"] + 1) % len(opts)
                opts[j] = opts[j].replace(" the ", " a ", 1)
                made += 1
                yield twin, {**it, "options": opts}


def write_csv(items: Iterable[tuple[Clip, dict[str, Any]]], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        q: open(folder / f"egotom_{q}_shuffled.csv", "w", newline="", encoding="utf-8")
        for q in CHOICES
    }
    writers = {}
    for q, f in files.items():
        cols = [
            "vuid",
            "cuid",
            "narrations_in_context",
            f"gt_{q}",
            *(f"{q}_choice_{LETTERS[j]}" for j in range(CHOICES[q])),
            "clip_start_time",
            "clip_end_time",
        ]
        writers[q] = csv.writer(f)
        writers[q].writerow(cols)
    for clip, it in items:
        q = it["q"]
        context = clip.context + (f"\n    09m:59s | #C {it['truth']}" if it.get("leak") else "")
        end = clip.start + clip.lines[-1][0]
        writers[q].writerow(
            [
                clip.vuid,
                clip.cuid,
                context,
                it["truth"],
                *it["options"],
                f"{clip.start:.6f}",
                f"{end:.6f}",
            ]
        )
    for f in files.values():
        f.close()


def write_jsonl(items: Iterable[tuple[Clip, dict[str, Any]]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for k, (clip, it) in enumerate(items):
            q = it["q"]
            context = clip.context + (f"\n    09m:59s | #C {it['truth']}" if it.get("leak") else "")
            t = clip.lines[-1][0]
            rec = {
                "item_id": f"item-{k:07d}-{q}",
                "question_type": q,
                "question": QUESTION[q],
                "options": it["options"],
                "answer": it["answer"],
                "origins": [
                    "truth" if o == it["truth"] else "counterfactual" for o in it["options"]
                ],
                "group": clip.cuid,
                "visible": {"context": context, "query_time": f"{t // 60:02d}m:{t % 60:02d}s"},
                "privileged": {
                    "transition": clip.future[0],
                    "future": "\n".join(clip.future),
                    "truth": {q: it["truth"]},
                    "summary": f"C works with the {clip.future[0][-30:]}",
                    "source": "synthetic",
                },
            }
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def bank(fmt: str, n: int, seed: int, workdir: Path) -> Path:
    """The generated bank (made once per format, size and seed)."""
    path = workdir / f"{fmt}_{n}_s{seed}" / ("bank.jsonl" if fmt == "jsonl" else "")
    done = path.parent / ".done" if fmt == "jsonl" else path / ".done"
    if done.is_file():
        return path
    t0 = time.perf_counter()
    items = generate(n, seed)
    (write_jsonl if fmt == "jsonl" else write_csv)(items, path)
    done.write_text("")
    print(f"generated {fmt} {n} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def _time_v(stderr: str) -> dict[str, float]:
    def grab(label: str) -> str:
        m = re.search(rf"^\s*{re.escape(label)}: (.+)$", stderr, re.M)
        return m.group(1).strip() if m else ""

    wall = grab("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(x) for x in wall.split(":")] if wall else [0.0]
    seconds = sum(p * 60**k for k, p in enumerate(reversed(parts)))
    return {
        "wall_seconds": round(seconds, 1),
        "peak_rss_mb": round(float(grab("Maximum resident set size (kbytes)") or 0) / 1024, 1),
        "user_seconds": float(grab("User time (seconds)") or 0),
        "system_seconds": float(grab("System time (seconds)") or 0),
    }


def _tree_memory(
    p: subprocess.Popen[str], every: float = 0.5, pss_every: int = 10
) -> dict[str, Any]:
    """Wait for ``p``, sampling the audit's processes (it and its workers; /usr/bin/time reports
    the largest single one) every ``every`` seconds: the largest sum of their resident sets
    (pages a forked worker shares with its parent counted in each: an upper bound), every
    ``pss_every``-th sample the largest sum of their proportional sets (a shared page split among
    its sharers: the memory they use together), and per process its peak resident set and when
    it was first and last seen (seconds from the start), to tell which check's process it was."""
    import psutil

    peak = pss_peak = 0
    seen: dict[int, dict[str, float]] = {}
    start = time.monotonic()
    k = 0
    while p.poll() is None:
        try:
            procs = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            procs = []
        total = pss = 0
        now = round(time.monotonic() - start, 1)
        for q in procs:  # /usr/bin/time itself is tiny; its child is the audit
            try:
                rss = q.memory_info().rss
                if k % pss_every == 0:
                    pss += q.memory_full_info().pss
            except psutil.Error:
                continue
            total += rss
            row = seen.setdefault(q.pid, {"first_s": now, "peak_rss_mb": 0.0})
            row["last_s"] = now
            row["peak_rss_mb"] = max(row["peak_rss_mb"], round(rss / 2**20, 1))
        peak = max(peak, total)
        pss_peak = max(pss_peak, pss)
        k += 1
        time.sleep(every)
    return {
        "peak_rss_all_processes_mb": round(peak / 2**20, 1),
        "peak_pss_all_processes_mb": round(pss_peak / 2**20, 1),
        "processes": sorted(
            ({"pid": pid, **row} for pid, row in seen.items() if row["peak_rss_mb"] >= 100),
            key=lambda r: r["first_s"],
        ),
    }


def run_audit(
    path: Path, embeddings: bool, out: Path, cache: Path, code: Path, extra: list[str], cold: bool
) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "gen",
        "audit",
        f"input={path}",
        f"embeddings={str(embeddings).lower()}",
        f"hydra.run.dir={out}",
        f"cache_dir={cache}",
        "progress=off",
        *extra,
    ]
    load = os.getloadavg()[0]
    size = sum(f.stat().st_size for f in (path.rglob("*") if path.is_dir() else [path]))
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        # a 1M-item bank is 4.7 GB, over the default cap of one input (2 GiB)
        "GEN_MAX_INPUT_BYTES": str(max(size + 1, 2**31)),
    }
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=code, env=env)
        memory = _tree_memory(p)
        err.seek(0)
        stderr = err.read()
    row: dict[str, Any] = {
        "exit_code": p.returncode,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        **_time_v(stderr),
        **memory,
    }
    report = out / "audit.json"
    if report.is_file():
        rep = json.loads(report.read_text())
        row["findings"] = rep["summary"]["by_severity"]
        row["check_seconds"] = {
            c["key"]: c["seconds"] for c in rep["checks"] if c["status"] == "ran"
        }
        if rep.get("embedding"):  # texts asked for, and computed (each distinct text once)
            row["embedding"] = rep["embedding"]
        row["findings_by_check"] = {
            c["key"]: sum(c["findings"].values()) for c in rep["checks"] if c["findings"]
        }
    else:
        row["stderr"] = stderr[-2000:]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[30_000, 100_000, 1_000_000])
    ap.add_argument("--formats", nargs="+", default=["csv", "jsonl"], choices=["csv", "jsonl"])
    ap.add_argument(
        "--embeddings-sizes",
        type=int,
        nargs="*",
        default=[30_000, 100_000],
        help="sizes also run with embeddings=true (cold embedding cache)",
    )
    ap.add_argument("--no-plain", action="store_true", help="skip the embeddings=false runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/audit_scale"))
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--label", default="", help="a note stored with each row (e.g. the commit)")
    ap.add_argument(
        "--code",
        type=Path,
        default=ROOT,
        help="the checkout whose audit runs (another commit: before/after)",
    )
    ap.add_argument(
        "--warm", action="store_true", help="keep the embedding cache of the previous run"
    )
    ap.add_argument(
        "--embedder-threads",
        type=int,
        default=1,
        help="torch threads of the embedder (1: on a shared 2-core machine more threads only "
        "contend)",
    )
    args = ap.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"runs": []}
    results.update(
        {
            "machine": f"{platform.node() or 'vm'}: {os.cpu_count()} cores, "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB",
            "python": platform.python_version(),
        }
    )
    for n in sorted(args.sizes):
        for fmt in args.formats:
            path = bank(fmt, n, args.seed, args.workdir)
            if args.generate_only:
                continue
            for emb in ([] if args.no_plain else [False]) + (
                [True] if n in args.embeddings_sizes else []
            ):
                out = args.workdir / "runs" / f"{fmt}_{n}_{'emb' if emb else 'noemb'}"
                row = {
                    "format": "egotom_csv" if fmt == "csv" else "mcq_jsonl",
                    "items": n,
                    "embeddings": emb,
                    "input_mb": round(
                        sum(
                            p.stat().st_size for p in (path.rglob("*") if path.is_dir() else [path])
                        )
                        / 2**20,
                        1,
                    ),
                    "date": dt.date.today().isoformat(),
                    "label": args.label,
                    "code": subprocess.run(
                        ["git", "rev-parse", "--short", "HEAD"],
                        capture_output=True,
                        text=True,
                        cwd=args.code,
                    ).stdout.strip()
                    or str(args.code),
                    "embedding_cache": ("warm" if args.warm else "cold") if emb else None,
                    **run_audit(
                        path,
                        emb,
                        out,
                        args.workdir / "cache",
                        args.code,
                        [f"embedder.threads={args.embedder_threads}"] if emb else [],
                        cold=not args.warm,
                    ),
                }
                print(json.dumps(row), flush=True)
                results["runs"] = [
                    r
                    for r in results["runs"]
                    if (r["format"], r["items"], r["embeddings"], r.get("label", ""))
                    != (row["format"], n, emb, args.label)
                ] + [row]
                RESULTS.parent.mkdir(parents=True, exist_ok=True)
                RESULTS.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
