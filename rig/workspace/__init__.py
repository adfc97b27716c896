"""A run's workspace: built from the fixture, scratch copies, protected files, change scope."""
