"""Progress you can see: a bar with rate and ETA on a terminal, one log line every N seconds elsewhere.

    bar = Progress(total=40, desc="grpo", unit="update")
    bar.update(1, reward=0.41, prs_b=73.2)       # the figures so far go after the counts
    bar.close()

On a terminal (stderr is a TTY) this is a tqdm bar. In a batch job or a log file a redrawn bar is
noise, so the same progress becomes one line on the ``progress`` logger at most every ``every_s``
seconds (and at the end): ``grpo: 12/40 update (30%), 0.81 update/s, ETA 35 s, reward=0.41``.
Training stages, evaluation, builds and the frames stage all report through it.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from infra.ranks import Ranks

log = logging.getLogger("progress")


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def eta_text(seconds: float) -> str:
    """``ETA`` in the largest sensible unit.

    >>> eta_text(35.2), eta_text(754), eta_text(7300)
    ('35 s', '12.6 min', '2.0 h')
    """
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Counts ``total`` units of work from ``initial`` (a resumed run); see the module docstring."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str = "it",
        initial: int = 0,
        every_s: float = 30.0,
        terminal: bool | None = None,
    ):
        self.total, self.desc, self.unit = total, desc, unit
        self.n, self.start_n = initial, initial
        self.every_s = every_s
        self.t0 = self.last = time.monotonic()
        self.postfix: dict[str, Any] = {}
        self.bar = None
        if sys.stderr.isatty() if terminal is None else terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True)

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.n += n
        self.postfix.update(postfix)
        if self.bar is not None:
            if postfix:
                self.bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= self.every_s or self.n >= self.total:
            self.last = now
            log.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """The log line of the current state (counts, share, rate, ETA, the figures so far)."""
        elapsed = (now or time.monotonic()) - self.t0
        done = self.n - self.start_n
        rate = done / elapsed if elapsed > 0 else 0.0
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        eta = f", ETA {eta_text((self.total - self.n) / rate)}" if rate > 0 and self.n < self.total else ""
        extra = "".join(f", {k}={_fmt(v)}" for k, v in self.postfix.items())
        return f"{self.desc}: {self.n}/{self.total} {self.unit}{share}, {rate:.3g} {self.unit}/s{eta}{extra}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Tee:
    """A text stream that writes to the console stream and to a log file."""

    def __init__(self, stream, log_file):
        self.stream, self.log_file = stream, log_file

    def write(self, text: str) -> int:
        self.log_file.write(text)
        self.log_file.flush()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log_file.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def console(log_path: str | None = None, level: int = logging.INFO) -> None:
    """Set up an entry point's console: log lines (with ``rank R/W`` under a multi-process launch, so
    interleaved ranks stay apart) and, with ``log_path``, a copy of everything printed to stdout and
    stderr appended to that file (the run folder's log holds what the console showed)."""
    from pathlib import Path

    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handle = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
        if not isinstance(sys.stdout, _Tee):
            sys.stdout = _Tee(sys.stdout, handle)
            sys.stderr = _Tee(sys.stderr, handle)
    ranks = Ranks.from_env()
    rank = f"rank {ranks.rank}/{ranks.world} " if ranks.world > 1 else ""
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s {rank}%(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
        force=True,
    )
