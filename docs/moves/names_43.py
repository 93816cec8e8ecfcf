"""The names of issue 43, as a script: one suffix for the classes of a config and one name for SFT's
block. Run once, from the repository root, on a clean tree:

    python docs/moves/names_43.py            # renames, rewrites every reference, formats
    python docs/moves/names_43.py --dry-run  # prints what it would rename

What it renames:

- Every dataclass of a config ends in ``Config`` (they ended in Config, Settings, Blocks, Options or
  Root): a stage's block is ``<Stage>StageConfig`` (``sft:``, ``grpo:``, the demo's), the shared
  roots' bases are ``ModelRootConfig``/``DataRootConfig``, a source's options are
  ``<Source>SourceConfig`` (and ``SourceSpec.options``/``make_options`` are ``config``/``make_config``).
- SFT's block ``train:`` is ``sft:`` (``train`` is also the package of both stages and a split):
  ``sft.learning_rate=1e-5`` on the command line, ``${sft.output_dir}``, ``cfg.sft`` in code, as
  GRPO's is ``grpo:``. Only the fields of that block follow (``train.<field>``), never a module
  ``train.<name>`` or a split.

Compare the validated configs before and after (``docs/moves/configs_43.py``): the only change is the
block's name.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

#: old class name -> new one; whole words, in every tracked text file.
CLASSES = {
    "StageSettings": "StageConfig",
    "TrainSettings": "SFTStageConfig",
    "GRPOSettings": "GRPOStageConfig",
    "LossSettings": "LossConfig",
    "LoraSettings": "SFTLoraConfig",  # peft's LoraConfig is imported beside it
    "PlanSettings": "PlanConfig",
    "ModelBlocks": "ModelRootConfig",
    "DataBlocks": "DataRootConfig",
    "EntrySettings": "EntryConfig",
    "DemoSettings": "DemoStageConfig",
    "MixRoot": "MixConfig",
    "ScoreSettings": "ScoreConfig",
    "OverfireOptions": "OverfireConfig",
    "NoOptions": "NoSourceConfig",
    "BlinkOptions": "BlinkSourceConfig",
}

#: (file, old, new): the edits a pattern cannot make.
PATCHES = [
    ("data_builders/registry.py", "    options: type\n", "    config: type\n"),
    ("data_builders/registry.py", "fields(self.options)", "fields(self.config)"),
    ("data_builders/registry.py", "return self.options(**values)", "return self.config(**values)"),
    (
        "data_builders/registry.py",
        '"""The options dataclass from plain values;',
        '"""The config dataclass from plain values;',
    ),
    ("data_builders/sources/__init__.py", "options=Options)", "config=<Name>SourceConfig)"),
    ("docs/design.md", "options=Options)", "config=<Name>SourceConfig)"),
    ("docs/design.md", "an options dataclass (its own config keys", "its config dataclass (its own keys"),
    # the docs test knew one block named like a package; there is none now
    (
        "tests/test_docs.py",
        "of one. A dotted name whose second part is no module is read as\n"
        "a config key (``train.output_dir``) and must be a key of that block. Python files",
        "of one. Python files",
    ),
    (
        "tests/test_docs.py",
        '''@cache
def _config_keys() -> dict[str, frozenset[str]]:
    """The keys of the root blocks that share a package's name (``train.output_dir``)."""
    from train.sft.config import TrainSettings

    return {"train": frozenset(f.name for f in fields(TrainSettings))}


''',
        "",
    ),
    (
        "tests/test_docs.py",
        """        if k == 1 and rest[0] in _config_keys().get(parts[0], ()):
            return True  # a config key of the block named like the package
""",
        "",
    ),
    # plain dicts standing for a saved SFT config
    (
        "tests/test_config_defaults.py",
        '{"train": {"seed": 0, "learning_rate": 1e-3}',
        '{"sft": {"seed": 0, "learning_rate": 1e-3}',
    ),
    ("tests/test_config_defaults.py", '        "train.seed"\n', '        "sft.seed"\n'),
    ("tests/eval/test_checkpoints.py", '"train": {"seed": 0}', '"sft": {"seed": 0}'),
    # prose naming the block
    ("train/sft/config.py", "(the ``train`` block)", "(the ``sft`` block)"),
    ("train/sft/config.py", "    train: TrainSettings = ", "    sft: TrainSettings = "),
    ("train/sft/trainer.py", "from the ``train`` block", "from the ``sft`` block"),
    ("train/stage_config.py", "(``train`` in ``conf/sft.yaml``", "(``sft`` in ``conf/sft.yaml``"),
]

#: The YAML files whose top-level ``train:`` is SFT's block.
SFT_YAML = ["conf/sft.yaml", "conf/experiment/p3i_4b_sft.yaml", "conf/experiment/toy_sft.yaml"]

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".in", ".cfg"}
TEXT_NAMES = {"Makefile", "run"}


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    return [
        Path(f)
        for f in out
        if Path(f).exists()
        and (Path(f).suffix in TEXT_SUFFIXES or Path(f).name in TEXT_NAMES)
        and not f.startswith("docs/moves/")
    ]


def _class_fields(path: str, name: str) -> list[str]:
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    sys.exit(f"names: no class {name} in {path}")


def source_classes() -> dict[str, str]:
    """``<Source>Options`` -> ``<Source>SourceConfig`` for every source module."""
    out = {}
    for path in sorted(Path("data_builders/sources").glob("*.py")):
        for name in re.findall(r"^class (\w+)Options\b", path.read_text(), flags=re.M):
            out[f"{name}Options"] = f"{name}SourceConfig"
    return out


def block_fields() -> list[str]:
    """The keys of SFT's block: its own fields and the ones both stages share."""
    return _class_fields("train/stage_config.py", "StageSettings") + _class_fields(
        "train/sft/config.py", "TrainSettings"
    )


def rename_block(text: str, keys: list[str]) -> str:
    text = re.sub(r"\bcfg\.train\b(?!\()", "cfg.sft", text)
    text = re.sub(r'\b(cfg|config)\["train"\]', r'\1["sft"]', text)
    key = "|".join(sorted(keys, key=len, reverse=True))
    return re.sub(rf"(?<![\w.])train\.({key})\b", r"sft.\1", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    classes = {**CLASSES, **source_classes()}
    keys = block_fields()
    if args.dry_run:
        for old, new in classes.items():
            print(f"{old} -> {new}")
        print(
            f"train.{{{','.join(keys)}}} -> sft.*  (and cfg.train -> cfg.sft, train: -> sft: in {', '.join(SFT_YAML)})"
        )
        return
    for file, old, new in PATCHES:  # first: they quote the old names
        path = Path(file)
        text = path.read_text()
        if old not in text:
            sys.exit(f"names: patch for {file} does not apply: {old!r}")
        path.write_text(text.replace(old, new))
    words = re.compile(r"\b(" + "|".join(map(re.escape, classes)) + r")\b")
    for path in tracked_text_files():
        text = path.read_text()
        new = words.sub(lambda m: classes[m.group(1)], text)
        new = re.sub(r"\boptions=(\w+SourceConfig)\b", r"config=\1", new)
        new = re.sub(r"\bmake_options\b", "make_config", new)
        new = re.sub(r"\b((?:get_source|SOURCES\.get)\([^()]*\))\.options\b", r"\1.config", new)
        new = re.sub(r"\boptions dataclass\b", "config dataclass", new)
        new = rename_block(new, keys)
        if path.as_posix() in SFT_YAML:
            new = re.sub(r"^train:", "sft:", new, flags=re.M)
        if new != text:
            path.write_text(new)
    ruff = [sys.executable, "-m", "ruff"]
    subprocess.run([*ruff, "check", "--fix", "--unsafe-fixes", "--select", "F401,I", "--quiet", "."])
    subprocess.run([*ruff, "format", "--quiet", "."], check=True)
    subprocess.run(["git", "add", "-A", "."], check=True)


if __name__ == "__main__":
    main()
