"""The GRPO stage (``python -m train.grpo``): the entry point (``run``), its settings (``config``),
the update loop (``loop``), the loss (``loss``), rollouts (``rollout``) and the multi-rank
plumbing (``parallel``)."""
