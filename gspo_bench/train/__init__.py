"""One run: the RL step as phases (rollout, old-policy pass, minibatch updates, the row) and the loop
that runs them to a compute budget (`loop.train_run`), with what a run needs around it: its compute
accounting (`compute`), the supervised warm start (`warmstart`), held-out evaluation (`evaluation`)
and live tracking (`tracking`)."""
