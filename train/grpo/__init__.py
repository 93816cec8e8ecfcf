"""The GRPO stage (``python -m train.grpo``). Module by module: the module map of ``docs/design.md``."""
