"""The SFT stage (``python -m train.sft``). Module by module: the module map of ``docs/design.md``."""
