"""Training: the optimisers, the trainer (one step, evaluation, state), THE loop, checkpoints and run directories."""
