"""rig: a reproducible measurement rig for coding-agent harnesses.

`rig.__version__` names the code that measured a record (rig.version explains its form). It is
computed at first use, never at import: `import rig` runs nothing.
"""


def __getattr__(name: str) -> str:
    # A module-level __getattr__ makes `rig.__version__` lazy.
    if name == "__version__":
        from rig.version import rig_version

        return rig_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
