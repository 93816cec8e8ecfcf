"""The SFT stage (``python -m train.sft``): the entry point (``run``), its settings (``config``),
the dataset of rendered windows (``data``), the decision loss (``losses``) and the Trainer
(``trainer``)."""
