"""What an agent's session means: its shell commands and reads, judged against the task's pack."""
