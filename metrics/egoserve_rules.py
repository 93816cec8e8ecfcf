"""EgoServe input rules: time-window strings and service-type names, as the official evaluator reads
them and as the protocol text reads them (the ``strict`` view). Pure functions; docs/egoserve.md
has the table.

Official time windows (every value in seconds, clocks ``H:MM:SS`` or ``HH:MM:SS`` with an optional
fraction, computed as ``int(h) * 3600 + int(m) * 60 + float(s)``):

- ``DAYd HH:MM:SS-HH:MM:SS`` (EgoLife ground truth and every prediction): searched anywhere in the
  string, ``-`` or whitespace after the day, ``-`` between the clocks (an en dash does not parse);
  :func:`parse_day_window`. Prediction windows outside EgoLife need the ``DAYd`` but ignore it.
- HoloAssist ground truth: ``19.5-21.4``, ``00:00:19.5-00:00:21.4`` or ``01:24.1-01:24.7`` (MM:SS);
  :func:`parse_video_window`.

An unparsable window is ``None``; a value of a type the official code would crash on raises
:class:`TypeError`. The strict view reads :func:`parse_time_window` (en dashes, point windows and a
cross-midnight ``DAYd ...-DAYe ...`` also parse; anything else raises :class:`ValueError`).

>>> parse_day_window("DAY1 11:09:42-11:10:00"), parse_day_window("DAY1 11:09:42–11:10:00")
((1, 40182.0, 40200.0), None)
>>> official_subtype("egolife", "Episodic Memory Recall"), official_subtype("holoassist", "Memory Recall")
('memory_recall', 'Memory Recall')
"""

from __future__ import annotations

import re
from typing import Any

from metrics.egoserve import DATASET_SUBTYPES, SECONDS_PER_DAY, SUBTYPES

_HMS = r"\d{1,2}:\d{2}:\d{2}(?:\.\d+)?"
_DAY_WINDOW = re.compile(rf"DAY(\d+)\s*[-\s]\s*({_HMS})\s*-\s*({_HMS})")
_VIDEO_CLOCK = r"\d{1,2}(?::\d{2})+(?:\.\d+)?"
_VIDEO_WINDOW = re.compile(rf"({_VIDEO_CLOCK})\s*-\s*({_VIDEO_CLOCK})")


def _hms(text: str) -> float:
    parts = text.split(":")
    return int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2])


def parse_day_window(text: Any) -> tuple[int, float, float] | None:
    """(day, start, end) of a ``DAYd HH:MM:SS-HH:MM:SS`` window, seconds of the day; None if none.

    >>> parse_day_window("note: DAY3 10:00:05 - 10:00:06 approx"), parse_day_window("11:09:42-11:10:00")
    ((3, 36005.0, 36006.0), None)
    """
    if not isinstance(text, str):
        raise TypeError(f"a time window must be a string, got {type(text).__name__}")
    m = _DAY_WINDOW.search(text)
    return None if m is None else (int(m.group(1)), _hms(m.group(2)), _hms(m.group(3)))


def parse_pred_window(text: Any) -> tuple[float, float] | None:
    """(start, end) of a HoloAssist/CaptainCook4D prediction window (the ``DAYd`` is required and
    ignored); None for an empty or unparsable value.

    >>> parse_pred_window("DAY7 00:01:24-00:01:25"), parse_pred_window(None)
    ((84.0, 85.0), None)
    """
    if not text:
        return None
    parsed = parse_day_window(text)
    return None if parsed is None else parsed[1:]


def parse_video_window(text: Any) -> tuple[float, float] | None:
    """(start, end) of a HoloAssist ground-truth window in one of its three forms; None if unparsable.

    >>> parse_video_window("01:24.100-01:24.700"), parse_video_window("300 - 305"), parse_video_window("19.5–21.4")
    ((84.1, 84.7), (300.0, 305.0), None)
    """
    if not text:
        return None
    if not isinstance(text, str):
        raise TypeError(f"a time window must be a string, got {type(text).__name__}")
    if ":" in text:
        m = _VIDEO_WINDOW.match(text)
        if m is None:
            return None

        def seconds(clock: str) -> float:
            p = clock.split(":")
            return (
                int(p[0]) * 60 + float(p[1])
                if len(p) == 2
                else int(p[0]) * 3600 + int(p[1]) * 60 + float(p[2])
            )

        return seconds(m.group(1)), seconds(m.group(2))
    parts = text.split("-")
    if len(parts) != 2:
        return None
    try:
        return float(parts[0]), float(parts[1])
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# The strict (protocol) reading of a window

_CLOCK = r"\d+(?::\d+){0,2}(?:\.\d+)?"
_DAY = r"(?:DAY\s*(\d+)\s*[-–\s]?\s*)?"
_WINDOW = re.compile(rf"^\s*{_DAY}({_CLOCK})(?:\s*[-–]\s*{_DAY}({_CLOCK}))?\s*$", re.IGNORECASE)


def parse_clock(text: str) -> float:
    """Seconds of ``S``, ``MM:SS`` or ``HH:MM:SS`` (fractions allowed on the last field).

    >>> parse_clock("01:24.1"), parse_clock("00:00:19.5"), parse_clock("19.5")
    (84.1, 19.5, 19.5)
    """
    parts = text.strip().split(":")
    if not re.fullmatch(_CLOCK, text.strip()):
        raise ValueError(f"unparsable clock value {text!r}")
    seconds = float(parts[-1])
    if len(parts) > 1 and seconds >= 60:
        raise ValueError(f"seconds field out of range in {text!r}")
    if len(parts) == 3 and int(parts[1]) >= 60:
        raise ValueError(f"minutes field out of range in {text!r}")
    if len(parts) == 1:
        return seconds
    if len(parts) == 2:
        return int(parts[0]) * 60 + seconds
    return int(parts[0]) * 3600 + int(parts[1]) * 60 + seconds


def parse_time_window(text: Any, absolute_days: bool = False) -> tuple[float, float, float]:
    """(start, end, centre) seconds of a window string in the strict reading: the official forms,
    ``–`` as well as ``-``, a single clock value (a point), ``DAYd ...-DAYe ...``. ``absolute_days``
    (EgoLife) adds ``day * 86400`` and needs the ``DAYd``; elsewhere the day is dropped. The centre of
    a one-day window is ``day * 86400 + (start + end) / 2.0``, as the official evaluator computes it.

    >>> parse_time_window("DAY1 11:09:42–11:10:00", absolute_days=True)
    (126582.0, 126600.0, 126591.0)
    >>> parse_time_window("01:24.1")
    (84.1, 84.1, 84.1)
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a time-window string, got {text!r}")
    m = _WINDOW.match(text)
    if m is None:
        raise ValueError(f"unparsable time window {text!r}")
    day0, start_s, day1, end_s = m.groups()
    start = parse_clock(start_s)
    end = parse_clock(end_s) if end_s is not None else start
    if absolute_days:
        if day0 is None:
            raise ValueError(f"time window {text!r} has no DAYd prefix (needed for absolute time)")
        d0, d1 = int(day0), int(day1 if day1 is not None else day0)
        if d0 == d1:
            center = d0 * SECONDS_PER_DAY + (start + end) / 2.0
        start, end = d0 * SECONDS_PER_DAY + start, d1 * SECONDS_PER_DAY + end
        if d0 != d1:
            center = (start + end) / 2.0
    else:
        center = (start + end) / 2.0
    if end < start:
        raise ValueError(f"time window {text!r} ends before it starts")
    return start, end, center


# ---------------------------------------------------------------------------------------------
# Service-type names

#: Spellings (after ``lower().strip()``) the official evaluator maps to each subtype.
SUBTYPE_SPELLINGS: dict[str, str] = {
    "safety": "safety",
    "tool use": "tool_use",
    "tool_use": "tool_use",
    "next-step guidance": "next_step_guidance",
    "next_step_guidance": "next_step_guidance",
    "next step guidance": "next_step_guidance",
    "error-recovery": "error_recovery",
    "error_recovery": "error_recovery",
    "error recovery": "error_recovery",
    "resource reminder": "resource_reminder",
    "resource_reminder": "resource_reminder",
    "habit-coaching": "habit_coaching",
    "habit_coaching": "habit_coaching",
    "habit coaching": "habit_coaching",
    "long-horizon memory-link": "memory_link_contextual",
    "long horizon memory-link": "memory_link_contextual",
    "long-horizon memory link": "memory_link_contextual",
    "memory_link_contextual": "memory_link_contextual",
    "memory link contextual": "memory_link_contextual",
    "routine optimization": "routine_optimization",
    "routine_optimization": "routine_optimization",
    "episodic memory recall": "memory_recall",
    "memory_recall": "memory_recall",
    "memory recall": "memory_recall",
    "episodic task reminder": "task_reminder",
    "task_reminder": "task_reminder",
    "task reminder": "task_reminder",
}
#: Prediction spellings each dataset skips outright (not counted anywhere).
SKIPPED_SPELLINGS: dict[str, frozenset[str]] = {
    "egolife": frozenset({"personal progress feedback", "personal_progressive", "personal progressive"}),
    "holoassist": frozenset(),
    "captaincook4d": frozenset(
        k for k, v in SUBTYPE_SPELLINGS.items() if v in ("memory_recall", "task_reminder")
    ),
}
_MAIN_SPELLINGS = {
    f"{stem}{tail}": name
    for stem, name in (
        ("instant", "Instant"),
        ("short-term", "Short-Term"),
        ("long-term", "Long-Term"),
        ("episodic", "Episodic"),
    )
    for tail in ("", " proactive service", " proactive services")
}
#: Main types each dataset's reader knows (another spelling is kept as written).
DATASET_MAIN_TYPES = {
    "egolife": frozenset(_MAIN_SPELLINGS.values()),
    "holoassist": frozenset({"Instant", "Short-Term"}),
    "captaincook4d": frozenset({"Instant", "Short-Term"}),
}


def official_subtype(dataset: str, raw: Any, prediction: bool = True) -> str | None:
    """The subtype the official reader of ``dataset`` gives a predicted (``prediction=False``: a
    CaptainCook4D ground-truth) ``raw`` name: a subtype of the dataset, the raw name itself when it
    is not one (counted in the micro numbers only), or None when the dataset skips it.

    >>> official_subtype("egolife", "Personal Progress Feedback"), official_subtype("captaincook4d", "Tool-Use")
    (None, 'Tool-Use')
    """
    if not isinstance(raw, str):
        raise TypeError(f"a service type must be a string, got {type(raw).__name__}")
    key = raw.lower().strip()
    if prediction and key in SKIPPED_SPELLINGS.get(dataset, ()):
        return None
    subtype = SUBTYPE_SPELLINGS.get(key)
    return subtype if subtype in DATASET_SUBTYPES.get(dataset, SUBTYPES) else raw


def official_main_type(dataset: str, raw: Any) -> str:
    """The main type the official reader of ``dataset`` gives ``raw`` (an unknown one as written).

    >>> official_main_type("egolife", "Short-Term Proactive Service"), official_main_type("egolife", "Short Term")
    ('Short-Term', 'Short Term')
    """
    if not isinstance(raw, str):
        raise TypeError(f"a service type must be a string, got {type(raw).__name__}")
    name = _MAIN_SPELLINGS.get(raw.lower().strip())
    return name if name in DATASET_MAIN_TYPES.get(dataset, frozenset(_MAIN_SPELLINGS.values())) else raw


def strict_subtype(raw: Any) -> str | None:
    """One of the ten subtypes for ``raw`` in the strict reading (the official spellings, or any
    case/space/hyphen form of a subtype key), None when it names none.

    >>> strict_subtype("Next-Step Guidance"), strict_subtype("Long-Horizon Memory-Link"), strict_subtype("weather")
    ('next_step_guidance', 'memory_link_contextual', None)
    """
    if not isinstance(raw, str):
        return None
    key = raw.lower().strip()
    if key in SUBTYPE_SPELLINGS:
        return SUBTYPE_SPELLINGS[key]
    joined = re.sub(r"[\s\-]+", "_", key)
    return joined if joined in SUBTYPES else None
