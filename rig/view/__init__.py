"""`rig view`: a static site of an experiment's attempts, its templates, and the server that shows it."""
