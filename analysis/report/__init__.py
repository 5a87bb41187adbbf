"""Words, tables and rendering: the sections of a report, its sentences and tables, markdown and
HTML, and the one writer (writer) that saves report.md, report.html and the figures."""
