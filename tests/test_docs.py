"""Every code reference in the docs, the README, the docstrings and the comments points at something
that exists.

File paths with a suffix (``engine/streaming.py``, ``conf/render/hd.yaml``, ``docs/protocols.md``) and
folders written with a trailing slash must exist in the repository; dotted names of the project's
packages (``engine.streaming.StreamingEngine``, ``python -m train.grpo``) must be a module, or a
top-level name (or a class member) of one. Python files are read for their
docstrings and comments only; modules are parsed, not imported.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "perf",
    "pipeline",
    "train",
    "eval",
    "benchmarks",
    "engine",
    "data_builders",
    "metrics",
    "infra",
)
TOP = PACKAGES + ("conf", "slurm", "tests", "docs")
ALT_TOP, ALT_PACKAGES = "|".join(TOP), "|".join(PACKAGES)
PATH = re.compile(rf"(?<![\w./-])((?:{ALT_TOP})/[\w./*<>{{}}-]*[\w/*>}}])")
DOTTED = re.compile(rf"(?<![\w./-])((?:{ALT_PACKAGES})(?:\.[A-Za-z_]\w*)+)")
#: Path-like text that names a pattern or an example location, not one file of the repository.
NOT_REPO = re.compile(r"[*<>{}]")
SUFFIXES = (".py", ".yaml", ".md", ".sh", ".json", ".toml", ".txt", ".csv", ".jsonl")


def _text(path: Path) -> str:
    """What a file says to a reader: a Python file's docstrings and comments, a YAML or shell file's
    comments, a Markdown file whole."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return source
    if path.suffix != ".py":
        return "\n".join(line for line in source.splitlines() if line.lstrip().startswith("#"))
    parts = [
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):  # docstrings of modules, classes, functions, attributes
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            parts.append(node.value.value)
    return "\n".join(parts)


def _sources() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in PACKAGES + ("conf", "slurm"):
        files += sorted(p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".yaml", ".sh"))
    return files


@cache
def _names(module: Path) -> frozenset[str]:
    """Top-level names of a module, and ``Class.attr`` for its classes' attributes."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        targets = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [(a.asname or a.name).split(".")[0] for a in node.names]
        names.update(targets)
        if isinstance(node, ast.ClassDef):
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{item.name}")
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(f"{node.name}.{item.target.id}")
    return frozenset(names)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:k])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.exists():
            continue
        rest = parts[k:]
        if not rest:
            return True
        names = _names(module)
        return rest[0] in names and (len(rest) == 1 or ".".join(rest[:2]) in names or rest[0][0].islower())
    return False


def dangling(files: list[Path] | None = None) -> list[str]:
    out = []
    for f in files or _sources():
        text = _text(f)
        rel = f.relative_to(ROOT)
        for m in PATH.finditer(text):
            path = m.group(1).rstrip(".")
            if NOT_REPO.search(path) or not (path.endswith(SUFFIXES) or path.endswith("/")):
                continue
            if not (ROOT / path).exists():
                out.append(f"{rel}: {path} does not exist")
        for m in DOTTED.finditer(text):
            name = m.group(1).rstrip(".")
            if name.endswith(SUFFIXES) or _resolves(name):
                continue
            out.append(f"{rel}: {name} is not a module or a name of one")
    return out


def test_every_reference_exists():
    assert dangling() == []


def test_the_check_finds_a_dangling_reference(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "See engine/streaming.py and eval/nowhere.py; engine.streaming.StreamingEngine.run, engine.streaming.Nope.\n"
    )
    found = [line.split(": ", 1)[1] for line in dangling_in(doc)]
    assert found == [
        "eval/nowhere.py does not exist",
        "engine.streaming.Nope is not a module or a name of one",
    ]


def dangling_in(path: Path) -> list[str]:
    """:func:`dangling` of a file outside the repository (the test above)."""
    text = path.read_text()
    tmp = ROOT / "docs" / ".check.md"
    tmp.write_text(text)
    try:
        return dangling([tmp])
    finally:
        tmp.unlink()


#: A path a module-map row lists: a file with a suffix or a folder with a trailing slash.
MAP_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*(?:\.(?:py|sh|yaml|md)|/)")


def map_paths(design: str) -> list[str]:
    """The paths ``docs/design.md``'s module map lists: each row's folder, and each code span of its
    text that is a path, relative to that folder (or to the repository when it starts with a
    top-level folder)."""
    section = design.split("\n## Module map\n", 1)[1].split("\n## ", 1)[0]
    listed = []
    for folder, what in re.findall(r"^\| `([^`]+)` \| (.*) \|$", section, re.M):
        listed.append(folder)
        for name in re.findall(r"`([^`\s]+)`", what):
            if MAP_PATH.fullmatch(name):
                listed.append(name if name.split("/")[0] in TOP else folder + name)
    return listed


def unlisted_code(root: Path, design: str) -> list[str]:
    """What the module map gets wrong: a path it lists that does not exist, or a folder of code it
    does not list (a package or subpackage of the five layers, ``slurm/`` and each of its scripts,
    ``conf/`` and each config group that holds configs)."""
    listed = map_paths(design)
    out = [f"{p} is listed but does not exist" for p in listed if not (root / p).exists()]
    need = []
    for top in PACKAGES:
        need += sorted(
            f"{d.relative_to(root)}/"
            for d in [root / top, *(root / top).rglob("*")]
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
        )
    need += ["slurm/", *sorted(f"slurm/{f.name}" for f in (root / "slurm").glob("*.sh"))]
    need += ["conf/"] + sorted(
        f"{d.relative_to(root)}/" for d in (root / "conf").rglob("*") if d.is_dir() and any(d.glob("*.yaml"))
    )
    return out + [f"{p} exists but the module map does not list it" for p in need if p not in set(listed)]


def test_the_module_map_lists_every_folder_of_code_and_nothing_else():
    assert unlisted_code(ROOT, (ROOT / "docs" / "design.md").read_text(encoding="utf-8")) == []


#: Test folders that are not a package's: the Slurm scripts' (``slurm/``) and the full-disk helper
#: (``sitecustomize.py``) that the full-disk tests load into their child processes.
NOT_A_PACKAGE = {"slurm", "full_disk"}


def test_the_tests_mirror_the_packages():
    """docs/design.md: "one folder per package": each package's tests in ``tests/<package>/``, and no
    other folder but the Slurm scripts' and the full-disk helper."""
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert sorted(set(PACKAGES) - folders) == []
    assert sorted(folders - set(PACKAGES) - NOT_A_PACKAGE) == []


def test_the_module_map_check_finds_a_missing_path_and_an_unlisted_folder(tmp_path):
    for d in ("infra", "infra/deep", "slurm", "conf/model"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "infra" / "a.py").write_text("")
    (tmp_path / "infra" / "deep" / "b.py").write_text("")
    (tmp_path / "slurm" / "run.sh").write_text("")
    (tmp_path / "conf" / "model" / "tiny.yaml").write_text("")
    design = (
        "# Design\n\n## Module map\n\n| path | what it holds |\n|---|---|\n"
        "| `infra/` | the base (`a.py`, `gone.py`) |\n| `slurm/` | `run.sh` |\n"
        "| `conf/` | groups (`model/`) |\n\n## Next\n\n| `rewards/` | not the map |\n"
    )
    for top in PACKAGES[:-1]:  # the other layers, empty: nothing of theirs is code
        (tmp_path / top).mkdir()
    assert unlisted_code(tmp_path, design) == [
        "infra/gone.py is listed but does not exist",
        "infra/deep/ exists but the module map does not list it",
    ]


#: ``python -m <project module> [subcommand] args`` in the README and the docs, up to the end of the
#: code span, a comment, a table cell or the line.
COMMAND = re.compile(rf"python -m ((?:{ALT_PACKAGES})(?:\.\w+)*)([^`#|\n]*)")
#: A first argument that picks a subcommand (``data_builders build``, ``perf gpu``).
SUBCOMMAND = re.compile(r"[a-z][a-z_]*")


def advertised_commands() -> dict[tuple[str, ...], list[str]]:
    """Every ``python -m`` command the README and ``docs/*.md`` name, by (module, subcommand): the
    command lines, each with the file it is in."""
    found: dict[tuple[str, ...], list[str]] = {}
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in COMMAND.finditer(f.read_text(encoding="utf-8")):
            module, args = m.group(1), m.group(2).split()
            key = (module, args[0]) if args and SUBCOMMAND.fullmatch(args[0]) else (module,)
            found.setdefault(key, []).append(f"{f.relative_to(ROOT)}: python -m {module} {' '.join(args)}")
    return found


def _module_file(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base / "__main__.py" if base.is_dir() else base.with_suffix(".py")


def is_hydra(module: str) -> bool:
    """A Hydra entry point (``--cfg job``), not an argparse one (``--help``): a ``hydra.main`` app,
    or a dispatcher to Hydra mains (``python -m data_builders build``)."""
    return bool(re.search(r"@hydra\.main|Hydra main", _module_file(module).read_text(encoding="utf-8")))


def bad_group_choices(lines: list[str]) -> list[str]:
    """``group=option`` overrides of Hydra commands whose ``conf/<group>/<option>.yaml`` is missing
    (each value of a sweep's ``a,b`` too)."""
    out = []
    for line in lines:
        for arg in line.split(": ", 1)[1].split()[3:]:
            key, _, value = arg.partition("=")
            if not value or key.startswith(("+", "~")) or not (ROOT / "conf" / key).is_dir():
                continue
            if value.isupper() or NOT_REPO.search(value):  # a placeholder: source=NAME, benchmark=<name>
                continue
            for option in value.split(","):
                if option != "null" and not (ROOT / "conf" / key / f"{option}.yaml").exists():
                    out.append(f"{line}: conf/{key}/{option}.yaml does not exist")
    return out


def test_the_docs_advertise_commands_and_their_config_groups_exist():
    found = advertised_commands()
    for key in [
        ("train.sft",),
        ("train.grpo",),
        ("eval.run",),
        ("eval.model",),
        ("data_builders", "build"),
    ]:
        assert key in found, key
    for key, lines in found.items():
        assert _module_file(key[0]).exists(), lines[0]
    hydra = [line for key, lines in found.items() if is_hydra(key[0]) for line in lines]
    assert bad_group_choices(hydra) == []


def test_the_group_check_finds_a_missing_option():
    lines = ["README.md: python -m train.sft model=tiny experiment=toy_sft,nope data.dir=/x"]
    assert bad_group_choices(lines) == [f"{lines[0]}: conf/experiment/nope.yaml does not exist"]


def _start_line(key: tuple[str, ...]) -> list[str]:
    """The arguments of ``python -m``: the module (and subcommand) and ``--cfg job`` for a Hydra
    entry point, ``--help`` for an argparse one."""
    flag = "--cfg job" if is_hydra(key[0]) else "--help"
    return [*key, *flag.split()]


@pytest.mark.slow
def test_every_advertised_command_starts():
    """Each module (and subcommand) the docs advertise answers ``--help``, or ``--cfg job`` for a Hydra
    entry point, with exit 0: each run as ``__main__`` in its own process, forked two at a time from
    one that imported torch and transformers once (tests/command_starts.py), the project's modules
    imported by each."""
    found = advertised_commands()
    args = []
    for key in sorted(found):
        args += [*_start_line(key), "--"]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.command_starts", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [row["argv"] for row in rows] == [_start_line(key) for key in sorted(found)]
    failed = [
        f"{found[key][0]} -> exit {row['rc']}\n{row['tail']}"
        for key, row in zip(sorted(found), rows, strict=True)
        if row["rc"] != 0
    ]
    assert failed == [], "\n\n".join(failed)


#: A stage's command in the docs, the slurm headers or the conf comments: ``python -m <stage>``,
#: ``accelerate launch ... -m <stage>`` or ``sbatch ... slurm/<script>.sh`` (with ``EVAL_MODULE=``).
STAGE_LINE = re.compile(
    r"(?:(?P<watch>EVAL_MODULE=eval\.watch )?(?:sbatch|slurm/submit\.sh)(?P<flags>[^`#|\n]*?)slurm/(?P<script>sft|grpo|eval)\.sh"
    r"|-m (?P<module>train\.sft|train\.grpo|eval\.run|eval\.watch))(?P<args>[^`#|\n(]*)"
)
STAGE_OF = {"train.sft": "sft", "train.grpo": "grpo", "eval.run": "eval", "eval.watch": "eval"}
ROOT_OF = {"train.sft": "sft", "train.grpo": "grpo", "eval.run": "eval", "eval.watch": "watch"}
SCRIPT_MODULE = {"sft": "train.sft", "grpo": "train.grpo", "eval": "eval.run"}


def stage_lines(files: list[Path] | None = None) -> list[tuple[str, str, list[str], int, int | None]]:
    from infra.entry import split_argv

    """(where, module, overrides, GPUs the line asks for, its ZeRO stage) of every documented stage
    command whose arguments are all given (no ``...``, no placeholder); a sweep at its first values.
    ZeRO: the line's ``conf/accelerate/zero<N>`` config, else 2 for the sbatch scripts (their
    default), 0 for one plain process; None for a line that only prints (``--cfg``)."""

    out = []
    for f in _sources() if files is None else files:
        text = _text(f)
        for m in STAGE_LINE.finditer(text):
            module = m["module"] or ("eval.watch" if m["watch"] else SCRIPT_MODULE[m["script"]])
            args = m["args"].split()
            if args == ["-m"]:  # a mention of a sweep, not a command
                continue
            if "..." in m["args"] or any(NOT_REPO.search(a) or a.split("=")[-1].isupper() for a in args):
                continue
            overrides = split_argv([a for a in args if "=" in a or a.startswith("-")])[0]
            flags = m["flags"] or ""
            nodes = re.search(r"--nodes[= ](\d+)", flags)
            per_node = re.search(r"--gpus-per-node[= ](\d+)|--gres[= ]gpu:(\d+)|--gpus[= ](\d+)", flags)
            gpus = int(nodes[1]) if nodes else 1
            gpus *= int(next(g for g in per_node.groups() if g)) if per_node else 1
            line = text_line(m)
            zero = re.search(r"conf/accelerate/zero(\d)", line)
            zero = int(zero[1]) if zero else (2 if m["script"] else 0)
            printing = split_argv(args)[1]
            out.append(
                (
                    f"{f.relative_to(ROOT)}: {m.group(0).strip()}",
                    module,
                    overrides,
                    gpus,
                    None if printing else zero,
                )
            )
    return out


def text_line(m: re.Match) -> str:
    """The whole line a match is on."""
    text = m.string
    return text[text.rfind("\n", 0, m.start()) + 1 : text.find("\n", m.end()) % (len(text) + 1)]


def sft_finals(configs: list, where: str, before: int) -> set[str]:
    """The ``runs/<run_name>/final`` folders the documented SFT lines make: for a line of the README,
    those above it (the steps a reader has run); for a doc or a comment, any line's.
    The demo's SFT stage (``pipeline.demo``: ``runs/demo/sft``) counts everywhere."""
    source = where.split(": ", 1)[0]
    ordered = source == "README.md"
    finals = {"runs/demo/sft/final"}
    for j, (w, module, cfg, *_rest) in enumerate(configs):
        if (
            module == "train.sft"
            and cfg is not None
            and (not ordered or (w.startswith(source + ":") and j < before))
        ):
            finals.add(f"runs/{cfg.run_name}/final")
    return finals


def preflight_failures(lines, gpu_memory_gb: float = 80.0) -> list[str]:
    """What each stage's pre-flight (``engine.preflight``) says of each line, on the config alone: the
    splits are ones the data set has, a real model's plan fits ``gpu_memory_gb`` on the GPUs the line
    asks for, and GRPO's ``init=runs/<name>/final`` is the final/ of a documented SFT line's run."""
    from engine.preflight import check_stage, plan
    from infra.schema import compose
    from pipeline.config import SCHEMAS
    from pipeline.plan import PREFLIGHT
    from train.grpo.run import entry_preflight

    configs, checked = [], {}
    for where, module, overrides, gpus, zero in lines:
        key = (module, tuple(overrides))  # the docs repeat commands: each one composed once
        if key not in checked:
            try:
                cfg = compose(ROOT_OF[module], overrides, SCHEMAS[ROOT_OF[module]])
                check_stage(PREFLIGHT[STAGE_OF[module]], cfg, on_disk=False, memory=False)
                if module == "train.grpo" and cfg.entry.target:  # an experiment's own stages
                    entry_preflight(cfg)
                checked[key] = (cfg, None)
            except Exception as exc:  # noqa: BLE001 (each line's failure is reported, whatever it is)
                checked[key] = (None, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
        cfg, err = checked[key]
        configs.append((where, module, cfg, gpus, zero, err))
    failures = [f"{where}: {err}" for where, _, _, _, _, err in configs if err]
    for i, (where, module, cfg, gpus, zero, _) in enumerate(configs):
        if cfg is None or zero is None:
            continue
        init = os.path.normpath(cfg.init) if module == "train.grpo" and cfg.init else ""
        finals = sft_finals(configs, where, i)
        if init.startswith("runs/") and init not in finals:
            failures.append(
                f"{where}: init={init} is made by no documented SFT line before it ({sorted(finals)})"
            )
        sweep = " -m " in where.split(module, 1)[-1] + " "
        if module == "train.grpo" and sweep and not cfg.grpo.eval_every:
            failures.append(
                f"{where}: a sweep without held-out evaluations (grpo.eval_every=0) cannot be compared"
            )
        if module.startswith("train.") and cfg.model.kind == "pretrained":
            result = plan(PREFLIGHT[STAGE_OF[module]], cfg, gpu_memory_gb=gpu_memory_gb, gpus=gpus, zero=zero)
            if not result["fits"]:
                failures.append(f"{where}: would not fit {gpu_memory_gb:g} GB x {gpus} ({result['biggest']})")
    return failures


@pytest.mark.slow
def test_every_documented_stage_command_passes_its_preflight():
    """~60 lines composed in-process (a minute on 2 cores)."""
    lines = stage_lines()
    modules = {line[1] for line in lines}
    assert modules == set(STAGE_OF), modules
    assert len(lines) > 20
    failures = preflight_failures(lines)
    assert failures == [], "\n".join(failures)


def test_every_experiment_composes_and_passes_its_preflight():
    """Each ``conf/experiment/*.yaml`` opens with the command that runs it; that command composes and
    passes its stage's pre-flight (an experiment with an ``entry``, e.g. ``toy_overfire``, the
    pre-flight of the stages it runs too), on the config alone: a check added to a stage cannot break
    an experiment unseen. Seconds: nothing is built or trained."""
    files = sorted((ROOT / "conf" / "experiment").glob("*.yaml"))
    lines = stage_lines(files)
    named = {f.stem for f in files}
    assert {
        o.split("=", 1)[1] for _, _, over, *_ in lines for o in over if o.startswith("experiment=")
    } == named
    assert preflight_failures(lines) == []


def test_the_preflight_check_finds_what_would_fail_after_the_queue():
    lines = [
        ("a", "eval.watch", ["run_dir=runs/sft_4b", "data=mix_p3i", "split=test"], 1, 0),
        ("b", "train.sft", ["model=qwen3_vl_4b", "data=mix_p3i", "data.dir=/d"], 16, 2),
        ("c", "train.grpo", ["init=runs/nowhere/final", "data.dir=/d"], 1, 0),
        ("d: -m train.grpo -m", "train.grpo", ["init=runs/sft/final", "reward.reward_weights.prs=1"], 1, 0),
    ]
    failures = sorted(preflight_failures(lines))
    assert failures[0].startswith("a: PreflightError: split=test: data=mix_p3i has no split 'test'")
    assert failures[1] == "b: would not fit 80 GB x 16 (activations)"
    assert failures[2].startswith("c: init=runs/nowhere/final is made by no documented SFT line before it")
    assert failures[3].startswith("d: -m train.grpo -m: a sweep without held-out evaluations")
    assert len(failures) == 4


def _mode_rows(text: str) -> set[tuple[str, str]]:
    """(protocol, mode) of each row of docs/evaluation.md's table of scoring modes."""
    section = text.split("### Every scoring mode", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    rows = set()
    for line in section.splitlines()[2:]:
        names = re.findall(r"`([^`]+)`", line.split("|")[2])
        rows.add((names[0], names[1] if len(names) > 1 else "official"))
    return rows


def test_the_table_of_scoring_modes_lists_every_mode_and_its_definition():
    from benchmarks.protocols import PROTOCOLS, get_protocol

    text = (ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8")
    registered = set()
    for name in PROTOCOLS.names():
        protocol = get_protocol(name)
        registered |= {(name, mode) for mode in protocol.mode_names() or ["official"]}
        for mode, fmt in protocol.scoring_modes.items():  # a peer's mode names its source in the table
            assert fmt.definition and fmt.definition.split("/", 2)[0] in text, (name, mode)
    assert _mode_rows(text) == registered


def test_what_the_documented_commands_write_is_ignored_by_git():
    """The folders the README's commands write into (records, runs, exported models) never show in
    ``git status`` as files to commit."""
    written = [
        "data/built/toy/records.jsonl",
        "runs/eval/x/p3i/metrics.json",
        "exports/toy_sft/model.safetensors",
    ]
    for path in written:
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert ignored.returncode == 0, f"{path} is not ignored by .gitignore"
    assert (
        subprocess.run(["git", "check-ignore", "-q", "--no-index", "eval/run.py"], cwd=ROOT).returncode == 1
    )


#: The library's packages: every package but the tools over it (``perf``).
LIBRARY = tuple(p for p in PACKAGES if p != "perf")


def _library_modules():
    for package in LIBRARY:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_entry_point_packages_are_imported_by_the_two_toy_modules_docs_design_names_only():
    """docs/design.md: synthetic generators and experiments are entry points no library module imports,
    except the toy source and the tiny tokenizer's word lists."""
    entry = ("data_builders.synthetic", "train.experiments")
    importers = {
        path
        for path, tree in _library_modules()
        if not path.startswith(("data_builders/synthetic/", "train/experiments/"))
        and any(name.startswith(entry) for name in _imported(tree))
    }
    assert importers == {"data_builders/sources/toy.py", "engine/model.py"}


def test_one_module_spells_a_splits_records_file_name():
    """docs/design.md: one module holds each shared fact; a split's ``records.jsonl`` is
    ``data_builders.splits.RECORDS_JSONL`` everywhere else in the library (docstrings aside)."""
    spelt = []
    for path, tree in _library_modules():
        docs = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}  # docstrings
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if "records.jsonl" in node.value and path != "data_builders/splits.py":
                    spelt.append(f"{path}:{node.lineno}")
    assert spelt == []


def test_every_root_config_has_its_schema_in_the_one_registry():
    """docs/design.md: each root's typed schema is listed in ``pipeline.config.SCHEMAS``; ``build``'s is
    composed with the source it names (``data_builders.config.compose_build``)."""
    from pipeline.config import SCHEMAS

    roots = {p.stem for p in (ROOT / "conf").glob("*.yaml")}
    assert sorted(roots - set(SCHEMAS.names())) == ["build"]
    assert sorted(set(SCHEMAS.names()) - roots) == []


def registry_table(text: str) -> list[tuple[list[str], list[str]]]:
    """docs/design.md's table of registries: (registry names, files) per row."""
    table = text.split("| kind | registry | file |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        _, names, files, _ = line.rsplit("|", 3)
        rows.append((re.findall(r"`(\w+)`", names), re.findall(r"`([\w/.]+\.py)`", files)))
    return rows


def defined_registries(paths: list[Path]) -> set[tuple[str, str]]:
    """(name, file) of each module-level ``NAME = Registry(...)`` in ``paths``."""
    found = set()
    for path in paths:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "Registry"
            ):
                found |= {
                    (t.id, str(path.relative_to(ROOT))) for t in node.targets if isinstance(t, ast.Name)
                }
    return found


def test_the_table_of_registries_names_each_registry_where_it_is_defined():
    """docs/design.md, "Adding a benchmark, a reward or a data source": every row's registry is
    defined in a file the row names, and every registry of the code has its row."""
    code = [p for top in PACKAGES for p in (ROOT / top).rglob("*.py") if p.name != "registry.py"]
    defined = defined_registries(code)
    listed = set()
    for names, files in registry_table((ROOT / "docs" / "design.md").read_text(encoding="utf-8")):
        for name in names:
            where = {(name, f) for f in files} & defined
            assert where, f"docs/design.md lists {name} in {files}, which define no such Registry"
            listed |= where
    assert sorted(defined - listed) == []


def test_the_registry_table_check_finds_a_moved_registry():
    text = "| kind | registry | file |\n| --- | --- | --- |\n| reward | `REWARDS` | `rewards/grpo.py` |\n\n"
    ((names, files),) = registry_table(text)
    assert (names, files) == (["REWARDS"], ["rewards/grpo.py"])
    defined = defined_registries([ROOT / "train" / "grpo" / "rewards.py"])
    assert defined == {("REWARDS", "train/grpo/rewards.py")}
    assert not {(n, f) for n in names for f in files} & defined
