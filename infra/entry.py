"""The front door of the Hydra entry points: the command line composed and validated in-process
before Hydra runs it, so a user's mistake ends the command with one line naming the key or the file
(exit 2), never a traceback.

    cfg = front_door("eval.run", "eval", EvalConfig, check=lambda c: check_stage(EVAL, c))

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
from infra.schema import CONF_DIR, compose, validate

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
    validated: bool = True,
) -> Any:
    """``conf/<root>.yaml`` composed with the command line's overrides and validated against
    ``schema`` (``validated=False``: composed only), then ``check`` run on it (unless the command
    only prints); any error ends the command with one line (:func:`refuse`). Returns the config
    (None when only printing)."""
    overrides, printing = split_argv(sys.argv[1:] if argv is None else argv)
    typed_by = schema if validated else None
    cfg = _checked(prog, schema, lambda: compose(root, _transformed(overrides, transform), typed_by))
    if printing or check is None:
        return None if printing else cfg
    _run_check(prog, check, cfg)
    return cfg


def _transformed(overrides: list[str], transform: Callable[[list[str]], list[str]] | None) -> list[str]:
    return transform(overrides) if transform else overrides


def _checked(prog: str, schema: type, make: Callable[[], Any]) -> Any:
    """``make()`` (a composition, validated); a composition or validation error: :func:`refuse`."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return make()
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        refuse(prog, explain(exc, schema))


def _run_check(prog: str, check: Callable[[Any], Any], cfg: Any) -> Any:
    """``check(cfg)``'s answer; a check that fails: :func:`refuse`."""
    try:
        return check(cfg)
    except (ValueError, FileNotFoundError, OutputLocked) as exc:
        refuse(prog, str(exc))


def run_command(
    prog: str,
    root: str,
    schema: type,
    task: Callable[[Any, Any], Any],
    hydra_main: Callable[[], Any],
    check: Callable[[Any], Any] | None = None,
    transform: Callable[[list[str]], list[str]] | None = None,
    validated: bool = True,
) -> Any:
    """A Hydra entry point's command line, composed once and checked once: the overrides composed
    into ``conf/<root>.yaml`` and validated against ``schema`` (a mistake: one line, exit 2), then
    ``check(cfg)``, then ``task(cfg, check's answer)`` run as Hydra runs a job (its run dir, its
    ``.hydra/``, its logging) on that same config. A command line with Hydra flags (``-m``,
    ``--cfg``, ``--help``, ...) goes to ``hydra_main`` after :func:`front_door`: a sweep composes
    each of its points, whose task validates and checks it. ``validated=False``: the task types the
    config itself (``data_builders build``: the source's keys are the source's schema's)."""
    argv = sys.argv[1:]
    if any(a.startswith("-") for a in argv):
        front_door(prog, root, schema, argv, check, transform, validated)
        return hydra_main()
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    overrides = _transformed(split_argv(argv)[0], transform)
    with initialize_config_dir(config_dir=str(CONF_DIR), job_name=_job_name(task), version_base="1.3"):
        full = _checked(prog, schema, lambda: hydra_compose(root, overrides, return_hydra_config=True))
        cfg = _without_hydra(full)
        cfg = _checked(prog, schema, lambda: validate(cfg, schema)) if validated else cfg
        answer = _run_check(prog, check, cfg) if check is not None else None
        return _run_job(full, lambda _: task(cfg, answer))


def _job_name(task: Callable) -> str:
    """``hydra.job.name`` as ``hydra.main`` names it: after the file of the entry (``run``)."""
    return getattr(task, "__module__", "app").rpartition(".")[2] or "app"


def _without_hydra(full: Any) -> Any:
    """A composed config without its ``hydra`` node (what a task is given)."""
    from omegaconf import OmegaConf

    out = OmegaConf.create(OmegaConf.to_container(full, resolve=False))
    out.pop("hydra", None)
    return out


def _run_job(full: Any, task: Callable[[Any], Any]) -> Any:
    """``task`` run by Hydra as one job of the composed ``full`` config (``hydra.run.dir``, its
    ``.hydra/``, the job's logging and callbacks); an error of the task is raised here."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job
    from hydra.types import HydraContext, RunMode
    from omegaconf import open_dict

    with open_dict(full):
        full.hydra.mode = RunMode.RUN
    callbacks = Callbacks(full)
    callbacks.on_run_start(config=full, config_name=full.hydra.job.config_name)
    context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=callbacks)
    ret = run_job(task, full, job_dir_key="hydra.run.dir", job_subdir_key=None, hydra_context=context)
    callbacks.on_run_end(config=full, config_name=full.hydra.job.config_name, job_return=ret)
    return ret.return_value


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
