"""What spans training and evaluation: the demo, the memory plan, sweeps, the GPU check and the schema of every root config."""
