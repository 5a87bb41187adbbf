"""Imported by the fork server of `--parallel` workers, first of what it preloads (multiprocessing
imports it there and nowhere else): the server is killed the moment the suite's process, its
parent, dies, and every worker with it (each is killed when the server dies; see
`gspo_bench.suite.launch`)."""

from gspo_bench.suite.launch import die_with_parent

die_with_parent()
