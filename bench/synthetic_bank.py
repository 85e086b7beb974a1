"""The synthetic bank ``bench/audit_scale.py`` audits, generated deterministically (``seed``) in
both input formats the audit reads most: a folder of EgoToM CSVs
(``egotom_{goal,belief,actions}_shuffled.csv``, EgoToM's exact columns) and one JSONL of MCQ
records shaped like ``tom``'s (visible context and query time; privileged transition, future
narrations, the truths, a summary). Texts have EgoToM's lengths: a context of ~60 timed narration
lines (~600 words), options of 40-90 characters; one to three items (goal, belief, actions) per
clip share its context, as in EgoToM. A few plants give the checks work: exact duplicate rows
(0.1 %), near duplicates (one option reworded, one context line changed; 0.1 %), answers copied
into the context (0.1 %), and goal answers made the longest option more often than chance (a
length tell)."""

from __future__ import annotations

import csv
import json
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gen.formats.mcq import EGOTOM_CHOICES, egotom_columns

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
CHOICES = EGOTOM_CHOICES


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
        writers[q] = csv.writer(f)
        writers[q].writerow(egotom_columns(q))
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
