"""A pack's project environment (pack.toml `[environment]`): built once with uv, cached, locked.

`identity` says which environment a pack needs (a hash of what it is made from) and resolves the
interpreter; `uvtool` runs uv and the build's other commands with one-line errors; `build` resolves
the lock beside pack.toml and builds the environment into the cache under a file lock; `cache`
shows and prunes what the cache holds. This room imports only the schema, confine, paths and version.
"""
