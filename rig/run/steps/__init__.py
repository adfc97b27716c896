"""The steps of one run, one module each: prepare, agent, collect, protect, verify (check and hidden),
record (decide and record). Each takes what it works on first (the `Attempt`: which run, what it
pins, where its files go; protect: the prepared workspace), then by keyword the `Trail` and what
the steps before it returned, and returns what it found; rig.run.runner.run_one chains them.
`attempt` holds what they all share."""
