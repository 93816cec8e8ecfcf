"""``python -m eval.score``'s command line: its parser and the scoring settings it gives.

Here, below every protocol, so that a public benchmark's runner scores its official files with the
very options ``eval.score`` would parse (``benchmarks.protocols.public``) without importing the command.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import fields

from benchmarks.config import ScoringConfig
from benchmarks.protocols.egoserve_preds import RESPONSE_NAME
from benchmarks.scoring import CONTENT_SCORERS, ScoreConfig
from metrics.egoserve import TOLERANCE_S

DESCRIPTION = "Score predictions against ground truth with a benchmark's own metric (docs/protocols.md)."


def settings_from_args(args: argparse.Namespace) -> ScoreConfig:
    """The scoring settings of the parsed options (validated: ``--alpha -1`` is an error)."""
    return ScoreConfig(**{f.name: getattr(args, f.name) for f in fields(ScoringConfig)})


#: The scoring flags that take one of a fixed set of values.
SCORING_CHOICES = {"content": list(CONTENT_SCORERS), "dataset": sorted(TOLERANCE_S)}


def add_scoring_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`benchmarks.config.ScoringConfig` field (``--<name>``, or the field's ``flag``:
    ``open_content`` is ``--label-fallback``), with its default and help, floats typed."""
    for f in fields(ScoringConfig):
        flag = f.metadata["flag"] or "--" + f.name.replace("_", "-")
        kwargs = {"default": f.default, "dest": f.name, "help": f.metadata["help"]}
        if f.name in SCORING_CHOICES:
            kwargs["choices"] = SCORING_CHOICES[f.name]
        else:
            kwargs["metavar"] = flag[2:].replace("-", "_").upper()
        if "float" in str(f.type):
            kwargs["type"] = float
        parser.add_argument(flag, **kwargs)


def add_peer_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the peers' file shapes: which list of Em-Garde's result file is scored, and the
    clocks of a ProactiveVideoQA prediction file (docs/evaluation.md)."""
    parser.add_argument(
        "--detections",
        default="auto",
        choices=["auto", "detections", "checked_detections"],
        help="--mode online_emgarde: which list of Em-Garde's result file is scored (auto: "
        "checked_detections when any line holds one, else detections)",
    )
    parser.add_argument(
        "--pred-clock",
        default="auto",
        choices=["auto", "frame", "frames_seen"],
        help="ProactiveVideoQA: the clock of the prediction file's reply times (auto: by its shape: "
        "role turns, MMDuet2's, frames_seen; no role, Em-Garde's, frame)",
    )
    parser.add_argument(
        "--score-clock",
        default="as_written",
        choices=["as_written", "frame", "frames_seen"],
        help="ProactiveVideoQA: the clock the replies are scored on (as_written: unchanged)",
    )
    parser.add_argument(
        "--frame-interval",
        type=float,
        default=None,
        help="ProactiveVideoQA: the prediction file's frame interval, seconds, to move between clocks",
    )


def parse_options(argv: list[str] | None, protocols: Sequence[str]) -> argparse.Namespace:
    """``python -m eval.score``'s options parsed, ``--protocol`` one of ``protocols``."""
    parser = argparse.ArgumentParser(prog="python -m eval.score", description=DESCRIPTION)
    parser.add_argument("--protocol", required=True, choices=sorted(protocols))
    parser.add_argument(
        "--gt", required=True, action="append", help="ground truth (EgoServe: repeat with --pred)"
    )
    parser.add_argument("--pred", required=True, action="append", help="predictions")
    parser.add_argument(
        "--mode",
        default="official",
        help="a public benchmark's scoring mode: official (its own scorer, the default) or another "
        "definition scored on the same files, named after whose it is (ovo, streamingbench_proactive: "
        "online_emgarde; estp: guiego); docs/evaluation.md lists them",
    )
    add_scoring_flags(parser)
    parser.add_argument(
        "--model", default=None, help="the model's key in a prediction file holding several (StreamingBench)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="OVO-Bench, StreamingBench: refuse a prediction file that reuses an id or a question, or "
        "whose ground truth differs from the release's (default: score each entry against its own, "
        "as the official scorer does, with a warning naming them)",
    )
    add_peer_flags(parser)
    parser.add_argument("--per-sample", default=None, help="write one JSON line per sample here")
    parser.add_argument("--allow-missing", action="store_true", help="score a missing prediction as silence")
    parser.add_argument(
        "--model-suffix",
        default=None,
        help="EgoServe: suffix of EgoMemo's unit folders (default: EgoMemo's, e.g. -qwenvl_3_8b_instruct)",
    )
    parser.add_argument(
        "--response-name", default=RESPONSE_NAME, help="EgoServe: response file name in each unit folder"
    )
    args = parser.parse_args(argv)
    args.gt_list, args.pred_list = args.gt, args.pred
    if args.protocol != "egoserve" and (len(args.gt) > 1 or len(args.pred) > 1):
        parser.error("--gt and --pred may repeat only for --protocol egoserve")
    args.gt, args.pred = args.gt[0], args.pred[0]
    return args
