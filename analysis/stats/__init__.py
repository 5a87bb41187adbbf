"""Arrays to estimates: point estimates (metrics), intervals and tests (library), the logistic fit
(logistic). Imports nothing of the analysis: the bottom room (rliable's metrics.py / library.py)."""
