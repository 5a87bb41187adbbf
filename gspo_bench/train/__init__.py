"""The RL step as phases (rollout, old-policy pass, minibatch updates, the row) and the loop that
runs them to a compute budget: `gspo_bench.train.loop.train_run`."""
