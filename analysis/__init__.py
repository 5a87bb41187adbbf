"""gspo-bench analysis: results directories -> tidy tables, statistics across seeds, figures, reports.

This package reads what runs wrote and never imports torch, so reports can be made on any machine
with pandas and seaborn.

    from analysis.load import load_results
    from analysis.report import write_report
    write_report(load_results("runs/quickstart"), "runs/quickstart/report")
"""

__all__: list[str] = []
