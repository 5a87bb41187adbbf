"""The one kind of error the analysis raises for results it cannot analyse as asked (no results, another
version's, mixed suites, unmatched compute, an unreadable declaration): a caller catches ResultsError
and prints its one line."""


class ResultsError(ValueError):
    """Results that cannot be analysed as asked; the message says why in one line."""
