"""What the model says: a ``Reply`` (when, what, an optional category) and a stream's ``Prediction``
(its replies in time order), with their reader: what runners write and scorers read."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from data_builders.record_io import load_items
from data_builders.records import RecordError, check_number, check_text, require_field


@dataclass(frozen=True)
class Reply:
    """One thing the model said: when (seconds, record time axis), what, and an optional category."""

    time: float
    text: str
    category: str | None = None


@dataclass(frozen=True)
class Prediction:
    """All replies of the model on one stream, in time order."""

    id: str
    replies: list[Reply] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Any) -> Prediction:
        if not isinstance(data, dict):
            raise RecordError(f"expected a JSON object, got {type(data).__name__}")
        rid = data.get("id")
        try:
            if not isinstance(rid, str) or not rid:
                raise RecordError(f"expected a non-empty string id, got {rid!r}", field="id")
            raw = data.get("replies")
            if not isinstance(raw, list):
                raise RecordError("missing or not a list", field="replies")
            replies = []
            for i, r in enumerate(raw):
                if not isinstance(r, dict):
                    raise RecordError("expected an object", field=f"replies[{i}]")
                time = check_number(require_field(r, "time", f"replies[{i}]."), f"replies[{i}].time")
                if time < 0:
                    raise RecordError(
                        f"a reply time is seconds on the video's clock, got {time}",
                        field=f"replies[{i}].time",
                    )
                replies.append(
                    Reply(
                        time=time,
                        text=check_text(r.get("text", ""), f"replies[{i}].text"),
                        category=check_text(r.get("category"), f"replies[{i}].category", optional=True),
                    )
                )
            if any(b.time < a.time for a, b in zip(replies, replies[1:], strict=False)):
                raise RecordError("replies are not in time order", field="replies")
            return cls(id=rid, replies=replies)
        except RecordError as err:
            raise err.located(record=rid if isinstance(rid, str) and rid else None) from None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "replies": [asdict(r) for r in self.replies]}


def load_predictions(path: str | Path) -> list[Prediction]:
    """Read and validate predictions (``{"id", "replies"}`` per line)."""
    return load_items(path, Prediction.from_dict, "predictions")
