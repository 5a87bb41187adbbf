"""Builders the test files share (tiny suites and runs, synthetic results, routing capture): no
test file imports another test file."""
