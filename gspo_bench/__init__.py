"""gspo-bench: matched-compute benchmark of RL policy-optimisation objectives on MoE language models."""

__version__ = "0.2.0"
