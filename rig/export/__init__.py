"""`rig export`: results in other tools' formats (ATIF trajectories)."""
