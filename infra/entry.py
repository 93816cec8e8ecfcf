"""The front door of the Hydra entry points: the command line composed and validated in-process
before Hydra runs it, so a user's mistake ends the command with one line naming the key or the file
(exit 2), never a traceback.

    cfg = front_door("eval.run", "eval", EvalConfig, check=lambda c: check_stage("eval", c))

A key the schema lacks gets "did you mean" from the schema's own key paths (``splt`` -> ``split``),
whether it was written ``splt=``
(Hydra: "Could not override") or ``+splt=`` (the schema: "not in struct"). A sweep (``-m``,
``a,b``) is checked at its first value of each swept key; ``--cfg``/``--help`` skip ``check`` (the
stage's pre-flight), so printing a config never waits for or reads anything.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any, NoReturn, get_type_hints

from infra.files import OutputLocked
from infra.schema import compose

#: Hydra's own flags that take a value (``--cfg job``, ``--config-name x``).
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-path", "-cp"}
VALUE_FLAGS |= {"--config-dir", "-cd", "--info", "-i", "--experimental-rerun"}
#: Flags after which Hydra runs nothing (prints a config or help).
PRINT_FLAGS = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i"}


def refuse(prog: str, message: str) -> NoReturn:
    """End the command: ``<prog>: <message>`` (one line) on stderr, exit 2."""
    print(f"{prog}: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


def rewrite_argv(prog: str, rewrite: Callable[[list[str]], list[str]], errors: type[Exception]) -> None:
    """This command's own arguments (``sys.argv[1:]``) passed through ``rewrite`` before Hydra reads
    them; an ``errors`` exception from it ends the command (:func:`refuse`: one line, exit 2)."""
    try:
        sys.argv[1:] = rewrite(sys.argv[1:])
    except errors as exc:
        refuse(prog, str(exc))


def split_argv(argv: list[str]) -> tuple[list[str], bool]:
    """(the overrides of a command line, whether it only prints): flags and their values left out, a
    sweep's ``k=a,b`` at its first value."""
    overrides, printing, skip = [], False, False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            printing |= arg in PRINT_FLAGS
            skip = arg in VALUE_FLAGS
            continue
        key, eq, value = arg.partition("=")
        if eq and "," in value and not value.startswith(("[", "{", "'", '"')) and "(" not in value:
            value = value.split(",")[0]
        overrides.append(f"{key}{eq}{value}")
    return overrides, printing


def key_paths(schema: type, prefix: str = "") -> list[str]:
    """Every key path of a dataclass schema (``split``, ``data.dir``, ``sft.seed``, ...)."""
    out = []
    hints = get_type_hints(schema)
    for f in fields(schema):
        path = prefix + f.name
        out.append(path)
        if is_dataclass(hints.get(f.name)):
            out += key_paths(hints[f.name], path + ".")
    return out


def did_you_mean(key: str, schema: type) -> str:
    """`` (did you mean X?)`` for the schema key closest to ``key``, or ``""``."""
    close = difflib.get_close_matches(key.lstrip("+~"), key_paths(schema), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def explain(exc: BaseException, schema: type) -> str:
    """One line for a composition or validation error, naming the key."""
    text = str(exc)
    unknown = re.search(r"Could not override '([^']+)'", text) or re.search(
        r"Key '[^']+' not in '[^']+'\s+full_key: (\S+)", text
    )
    if unknown:
        return f"unknown key {unknown.group(1)}{did_you_mean(unknown.group(1), schema)}"
    full_key = re.search(r"full_key: (\S+)", text)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"{full_key.group(1)}: {first}" if full_key and full_key.group(1) not in first else first


def front_door(
    prog: str,
    root: str,
    schema: type,
    argv: list[str] | None = None,
    check: Callable[[Any], Any] | None = None,
    transform: Callable[[list[str]], list[str]] | None = None,
) -> Any:
    """``conf/<root>.yaml`` composed with the command line's overrides and validated against
    ``schema``, then ``check`` run on it (unless the command only prints); any error ends the
    command with one line (:func:`refuse`). Returns the config (None when only printing)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides, printing = split_argv(sys.argv[1:] if argv is None else argv)
    try:
        cfg = compose(root, transform(overrides) if transform else overrides, schema)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        refuse(prog, explain(exc, schema))
    if printing or check is None:
        return None if printing else cfg
    try:
        check(cfg)
    except (ValueError, FileNotFoundError, OutputLocked) as exc:
        refuse(prog, str(exc))
    return cfg


def quiet_libraries() -> None:
    """Keep entry points' output to what they print themselves (no progress bars, no banners)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    if "deepspeed" not in sys.modules and "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():  # DeepSpeed prints its CPU fallback on stdout, after our JSON
            os.environ["DS_ACCELERATOR"] = "cpu"
