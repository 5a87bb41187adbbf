"""gspo-bench analysis: results directories -> tidy tables, statistics across seeds, figures, reports.

This package reads what runs wrote and never imports torch, so reports can be made on any machine
with pandas and seaborn.
"""

__all__: list[str] = []
