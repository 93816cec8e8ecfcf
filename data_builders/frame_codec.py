"""The frame codec of the frame cache's compressed entries: a ``render.frame_format`` name and one
frame to and from a PNG, JPEG or WebP file's bytes (PIL). The entries themselves:
:mod:`data_builders.frame_cache`."""

from __future__ import annotations

import re

import numpy as np

#: Frame-cache entry formats (``render.frame_format``): ``raw`` (``.npy``, memory-mapped), ``png``
#: (lossless), ``jpeg<q>`` / ``webp<q>`` (lossy at quality ``q``, 1-100; JPEG with 4:2:0 chroma).
FRAME_FORMAT_HELP = "raw, png, jpeg<quality> or webp<quality> (quality 1-100, e.g. jpeg90)"

_FORMAT = re.compile(r"(raw|png)|(jpeg|webp)(\d{1,3})")

_PIL_NAMES = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}


def parse_frame_format(frame_format: str) -> tuple[str, int | None]:
    """``(codec, quality)`` of a ``render.frame_format``; ``ValueError`` naming the option.

    >>> parse_frame_format("jpeg90"), parse_frame_format("raw")
    (('jpeg', 90), ('raw', None))
    """
    m = _FORMAT.fullmatch(str(frame_format))
    if m and m.group(1):
        return m.group(1), None
    if m and 1 <= int(m.group(3)) <= 100:
        return m.group(2), int(m.group(3))
    raise ValueError(f"render.frame_format={frame_format}: expected {FRAME_FORMAT_HELP}")


def encode_frame(frame: np.ndarray, frame_format: str) -> bytes:
    """One ``(H, W, 3)`` uint8 frame as a PNG, JPEG or WebP file's bytes (PIL)."""
    import io

    from PIL import Image

    codec, quality = parse_frame_format(frame_format)
    buf = io.BytesIO()
    options = {"quality": quality} if quality is not None else {}
    Image.fromarray(frame).save(buf, format=_PIL_NAMES[codec], **options)
    return buf.getvalue()


def decode_frame(blob: bytes) -> np.ndarray:
    """The ``(H, W, 3)`` uint8 frame of :func:`encode_frame`'s bytes."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(blob)) as img:
        return np.asarray(img.convert("RGB") if img.mode != "RGB" else img)
