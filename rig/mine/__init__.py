"""Mining tasks from a repository's history: commits, patches, prompts, and the miner that verifies them."""
