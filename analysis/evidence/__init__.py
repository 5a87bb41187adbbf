"""Judgements on runs and arms: whether RL learned (learning), the family of tests and its Holm
correction (family, primary), the paper's checks as tests (paper), the stability classes
(stability), divergence and router-margin readings; `gather` puts them together for one report."""
