"""`rig import`: other tools' results as a rig results folder (docs/importing.md).

One module per format reads its source into `rig.ingest.common.Run`s (`inspect`: Inspect AI eval
logs; `harbor`: Harbor job folders; `atif`: ATIF trajectories; `table`: CSV, JSON, JSONL and Parquet
tables); `rig.ingest.common.write_import` turns them into records (`rig.schema.ForeignRecord`), with
the infrastructure excluded from every arm alike, and writes the folder `load_runs`, `rig report`
and `rig view` read.
"""
