"""What a benchmark is: one protocol per benchmark (runner, scorer, official format), the scoring core and the benchmark config; used by eval.run and GRPO's held-out evaluation."""
