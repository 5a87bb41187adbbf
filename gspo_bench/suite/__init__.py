"""Running a suite: a session loads the suite with its overrides and checks it (`session`,
`preflight`), plans its runs and their compute and memory (`plan`), gives each its starting weights
and runs them one after another, side by side or on Ray (`runner`, `launch`, `process_server`,
`outcomes`), draws the progress (`progress`) on a console that shows user text's control characters
as escapes (`console`), and lists what is registered (`catalog`). The library packages below know
nothing of it."""
