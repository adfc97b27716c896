"""Running an experiment: the runner and its steps, preflight, leftovers, reclassify, doctor, executors."""
