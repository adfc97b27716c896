"""The runner kinds of hidden tests: one module per kind (a `base.Kind`), the registry naming them,
and what the kinds share (junit XML and canaries, the hidden run, interpreter command lines)."""
