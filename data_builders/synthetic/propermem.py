"""Synthetic ProPerMem-style set: a year of timestamped first-person captions per person, clips with
one trigger window whose evidence is a few captions buried in it, lures, and negatives.

    python -m data_builders.synthetic.propermem --out /tmp/pm_synth --tokens 220000 --per-kind 8 --negatives 8 --videos
    python -m data_builders build source=propermem annotations=/tmp/pm_synth/clips.jsonl videos=/tmp/pm_synth out=/tmp/pm_built

Writes, in the ``propermem`` builder's format (``data_builders/sources/propermem.py``):
``clips.jsonl`` (one clip per line: history with ids, ``trigger`` with window/response/evidence, or
``trigger: null`` for a given negative; the builder adds an evidence-removed negative per positive),
``keyframes.npz`` (``ids``, ``vectors``: a synthetic keyframe embedding per caption, for the visual
retriever of the recall table), ``stats.json`` and, with ``--videos``, one small mp4 per clip.

Token count: whitespace-separated words (a lower bound on BPE tokens: a subword tokenizer gives at
least one token per word). Histories are generated until they hold ``--tokens`` words.
History times are negative seconds before the clip (a year reaches -3.15e7 s), captions between
07:00 and 23:00. The clip's own captions lie inside the clip (``c0`` at 4 s, the cue ``c1`` two
seconds before the window): they are what the assistant currently sees.
Keyframe vectors (``--visual-dim``) = normalized sum of prototypes of the place and the objects in
view plus noise; a ``visual`` matter's hidden object is in view (not named) in its evidence and its
cue, and, as decoys, in a few unrelated keyframes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_builders.synthetic.propermem_matters import ENTITY, PARAPHRASE, VISUAL

DAY = 86400.0
PLACES = {
    "kitchen": ["kettle", "mug", "fridge", "toaster", "frying pan", "cutting board", "coffee maker", "oven"],
    "hallway": ["shoe rack", "coat hook", "umbrella stand", "mirror", "doormat", "boiler"],
    "living room": ["sofa", "television", "bookshelf", "remote", "lamp", "houseplant"],
    "office": ["laptop", "desk", "printer", "notebook", "monitor", "report"],
    "garage": ["bicycle", "toolbox", "ladder", "car", "paint can"],
    "garden": ["hose", "rake", "flower bed", "watering can", "bench"],
    "bathroom": ["toothbrush", "towel", "sink", "pills", "mirror"],
    "bedroom": ["wardrobe", "alarm clock", "bed", "laundry basket", "backpack"],
    "supermarket": ["trolley", "shelf", "carton", "basket", "receipt"],
    "park": ["bench", "dog", "football", "path", "bin"],
}
PEOPLE = ["Marco", "Dana", "Kenji", "Omar", "Sofia", "Chen", "Lena", "Aisha", "Tom", "Bruno", "Eva", "Priya"]
VERBS = ["pick up", "put down", "wipe", "open", "close", "move", "check", "clean", "carry", "look at", "fill"]
ADJ = ["old", "new", "small", "blue", "red", "green", "heavy", "clean", "dusty", "wooden", "white", "black"]
TOPICS = ["the weather", "football", "a new recipe", "weekend plans", "the rent", "work deadlines", "a film"]
TEMPLATES = [
    "I {v} the {a} {o} in the {p} and then {v2} the {o2}.",
    "{n} and I talk about {t} while I {v} the {o} in the {p}.",
    "I walk into the {p}, {v} the {a} {o} and check my phone for messages.",
    "{n} hands me the {a} {o} in the {p} and we laugh about {t}.",
    "In the {p} I {v} the {o}, then sit for a while and think about {t}.",
]


@dataclass
class SynthConfig:
    """Knobs of :func:`generate` (see the module docstring)."""

    tokens: int = 220_000
    per_kind: int = 8
    negatives: int = 8
    clip_s: float = 60.0
    window: tuple[float, float] = (30.0, 42.0)
    visual_dim: int = 64
    lures_per_matter: int = 6
    decoys_per_object: int = 3
    seed: int = 0
    videos: bool = False


def routine(rng: random.Random) -> tuple[str, str, list[str]]:
    p = rng.choice(list(PLACES))
    o, o2 = rng.sample(PLACES[p], 2)
    text = rng.choice(TEMPLATES).format(
        v=rng.choice(VERBS), v2=rng.choice(VERBS), a=rng.choice(ADJ), o=o, o2=o2, p=p,
        n=rng.choice(PEOPLE), t=rng.choice(TOPICS),
    )  # fmt: skip
    return text, p, [o, o2]


def _time(rng: random.Random, lo_day: float = 1.0) -> float:
    day = rng.randint(int(lo_day), 365)
    return round(-day * DAY + rng.uniform(7 * 3600, 23 * 3600), 1)


class _Vision:
    """Prototype vectors of places and objects; a keyframe = normalized sum + noise."""

    def __init__(self, dim: int, rng: np.random.Generator) -> None:
        self.dim, self.rng, self.protos = dim, rng, {}

    def proto(self, name: str) -> np.ndarray:
        if name not in self.protos:
            v = self.rng.standard_normal(self.dim)
            self.protos[name] = v / np.linalg.norm(v)
        return self.protos[name]

    def frame(self, place: str, objects: list[str], noise: float = 0.35) -> np.ndarray:
        v = sum(self.proto(x) for x in [place, *objects])
        v = v + noise * self.rng.standard_normal(self.dim) / np.sqrt(self.dim)
        return (v / np.linalg.norm(v)).astype(np.float32)


def _matters(cfg: SynthConfig) -> list[dict]:
    out = []
    for i in range(cfg.per_kind):
        m = PARAPHRASE[i % len(PARAPHRASE)]
        out.append({"kind": "paraphrase", **m, "place": None, "object": None})
        name, role, rule, cue, resp = ENTITY[i % len(ENTITY)]
        alias = f"{name} is my {role}, we met years ago and still chat now and then."
        lures = [f"{name} and I have coffee and talk about {t}." for t in TOPICS[:3]]
        out.append(dict(kind="entity", evidence=[alias, rule], cue=cue, response=resp, lures=lures,
                        place=None, object=None))  # fmt: skip
        obj, place, ev, cue, resp = VISUAL[i % len(VISUAL)]
        lures = [f"I walk through the {place} and glance around." for _ in range(2)]
        out.append(dict(kind="visual", evidence=[ev], cue=cue, response=resp, lures=lures, place=place,
                        object=obj))  # fmt: skip
    return out


def generate(out_dir: str | Path, cfg: SynthConfig | None = None) -> dict:
    """Write the set under ``out_dir`` (see the module docstring); returns the stats."""
    cfg = cfg or SynthConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng, nrng = random.Random(cfg.seed), np.random.default_rng(cfg.seed)
    vision = _Vision(cfg.visual_dim, nrng)
    matters = _matters(cfg)
    entries, words = _diary(cfg, matters, rng)
    order = sorted(range(len(entries)), key=lambda i: entries[i]["time"])
    row_id = {r: f"m{k}" for k, r in enumerate(order)}
    history = [{"id": row_id[r], "time": entries[r]["time"], "text": entries[r]["text"]} for r in order]
    ids = [h["id"] for h in history]
    vectors = [vision.frame(entries[r]["place"], entries[r]["objects"]) for r in order]
    clips = _clips(cfg, matters, history, row_id, rng, vision, ids, vectors)
    with (out / "clips.jsonl").open("w") as fh:
        for c in clips:
            fh.write(json.dumps(c) + "\n")
    np.savez_compressed(out / "keyframes.npz", ids=np.array(ids), vectors=np.stack(vectors))
    if cfg.videos:
        _write_videos(out, clips, cfg)
    ev_words = [sum(len(entries[r]["text"].split()) for r in m["ev_rows"]) for m in matters]
    stats = {
        "config": asdict(cfg),
        "clips": len(clips),
        "positives": len(matters),
        "given_negatives": cfg.negatives,
        "history_entries": len(history),
        "history_tokens_words": words,
        "history_days": math.ceil(-history[0]["time"] / DAY),
        "evidence_share_max": max(ev_words) / words,
        "evidence_share_mean": sum(ev_words) / len(ev_words) / words,
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def _diary(cfg: SynthConfig, matters: list[dict], rng: random.Random) -> tuple[list[dict], int]:
    """The life log, unordered: each matter's evidence (its rows noted in ``m["ev_rows"]``), lures
    and decoys, then routine entries up to ``cfg.tokens`` words; the entries and their word count."""
    entries: list[dict] = []  # {time, text, place, objects}
    for m in matters:
        when = _time(rng, 2)
        m["ev_rows"] = []
        for j, text in enumerate(m["evidence"]):  # an alias long before the instruction it explains
            t = when - (len(m["evidence"]) - 1 - j) * rng.uniform(5, 60) * DAY
            place = m["place"] or rng.choice(list(PLACES))
            m["ev_rows"].append(len(entries))
            entries.append(dict(time=max(t, -365 * DAY + 8 * 3600), text=text, place=place,
                                objects=[m["object"]] if m["object"] else []))  # fmt: skip
        for text in m["lures"] * max(1, cfg.lures_per_matter // max(len(m["lures"]), 1)):
            entries.append(dict(time=_time(rng), text=text, place=m["place"] or rng.choice(list(PLACES)),
                                objects=[]))  # fmt: skip
        if m["object"]:
            for _ in range(cfg.decoys_per_object):
                text, place, objs = routine(rng)
                entries.append(dict(time=_time(rng), text=text, place=place, objects=objs + [m["object"]]))
    words = sum(len(e["text"].split()) for e in entries)
    while words < cfg.tokens:
        text, place, objs = routine(rng)
        entries.append(dict(time=_time(rng), text=text, place=place, objects=objs))
        words += len(text.split())
    return entries, words


def _clips(
    cfg: SynthConfig,
    matters: list[dict],
    history: list[dict],
    row_id: dict[int, str],
    rng: random.Random,
    vision: _Vision,
    ids: list[str],
    vectors: list[np.ndarray],
) -> list[dict]:
    """One clip per matter (its trigger points at the evidence rows) and ``cfg.negatives`` without
    one, each with two entries of its own whose ids and keyframe vectors are appended to ``ids``
    and ``vectors``."""
    clips, ts, te = [], *cfg.window
    for i, m in enumerate(matters + [None] * cfg.negatives):
        if m is None:
            text, place, objs = routine(rng)
            cue, hidden, trigger = text, [], None
        else:
            cue, place = m["cue"], m["place"] or rng.choice(list(PLACES))
            hidden = [m["object"]] if m["object"] else []
            evidence = [row_id[r] for r in m["ev_rows"]]
            trigger = {"window": [ts, te], "response": m["response"], "evidence": evidence}
        own = [
            {"id": f"k{i}c0", "time": 4.0, "text": f"I am in the {place} and look around."},
            {"id": f"k{i}c1", "time": ts - 2.0, "text": cue},
        ]
        ids += [o["id"] for o in own]
        vectors += [vision.frame(place, []), vision.frame(place, hidden)]
        clips.append(
            {
                "id": f"synth{i:03d}" + (f"-{m['kind']}" if m else "-given_neg"),
                "video": f"videos/synth{i:03d}.mp4",
                "clip_start": 0.0,
                "clip_end": cfg.clip_s,
                "history": history + own,
                "trigger": trigger,
                "kind": m["kind"] if m else "negative",
            }
        )
    return clips


def _write_videos(out: Path, clips: list[dict], cfg: SynthConfig) -> None:
    """One 32x32, 1 fps mp4 per clip: a flat colour per clip with a square appearing at the window."""
    from data_builders.synthetic.toy import write_mp4

    for i, c in enumerate(clips):
        frames = []
        for s in range(int(cfg.clip_s)):
            img = np.full((32, 32, 3), (37 * i) % 200 + 30, np.uint8)
            if c["trigger"] and s >= cfg.window[0]:
                img[8:24, 8:24] = (220, 40, 40)
            frames.append(img)
        write_mp4(out / c["video"], frames, 1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m data_builders.synthetic.propermem", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", type=int, default=SynthConfig.tokens, help="words per history")
    parser.add_argument("--per-kind", type=int, default=SynthConfig.per_kind)
    parser.add_argument("--negatives", type=int, default=SynthConfig.negatives)
    parser.add_argument("--clip-s", type=float, default=SynthConfig.clip_s)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--videos", action="store_true")
    args = parser.parse_args(argv)
    cfg = SynthConfig(
        tokens=args.tokens, per_kind=args.per_kind, negatives=args.negatives, clip_s=args.clip_s,
        seed=args.seed, videos=args.videos,
    )  # fmt: skip
    stats = generate(args.out, cfg)
    print(json.dumps(stats))
    return stats


if __name__ == "__main__":
    main()
