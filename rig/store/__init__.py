"""Results: the store of runs.jsonl and quarantine.jsonl, its columnar cache, migrations, redaction
and transcripts."""
