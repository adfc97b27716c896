"""The scripted harness: a real agent process that replays a task's patch, and its adapter."""
