"""CPU experiments that exercise the training stages end to end (run through their stage's entry
point with ``experiment=<name>``)."""
