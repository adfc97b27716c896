"""A worker process for work that can run beside the caller's: the report's figures and failures.md.

`rig report` is single-threaded Python; on a machine with a second core, what does not need the
statistics (matplotlib's import and drawing, writing failures.md) runs there while the report reads
the runs and computes the rest. The worker is only a speed-up: when it cannot start, or dies, the
work runs in the caller's process, with the same result.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")


class Worker:
    """One worker process, spawned at once (and given `warm_up` to run first, e.g. the imports the
    work will need), which runs functions of modules that import nothing heavy. Use as a context
    manager."""

    def __init__(self, warm_up: Callable[[], None] | None = None) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn, not fork: the caller holds threads (pyarrow's pool) that a forked child would lack.
        self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(1, multiprocessing.get_context("spawn"))
        if warm_up is not None:
            self._submit(warm_up)

    def _submit(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> "Future[T] | None":
        if self._pool is None:
            return None
        try:
            return self._pool.submit(function, *args, **kwargs)
        except Exception:  # noqa: BLE001 (the worker is a speed-up: whatever stops it, run here)
            self._pool = None
            return None

    def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> Callable[[], T]:
        """Start `function(*args, **kwargs)` in the worker; the returned callable waits for its
        result (running it here if the worker is gone). The function's own error is raised there."""
        from concurrent.futures.process import BrokenProcessPool

        future = self._submit(function, *args, **kwargs)

        def result() -> T:
            if future is not None:
                try:
                    return future.result()
                except BrokenProcessPool:
                    self._pool = None
            return function(*args, **kwargs)

        return result

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            # On an error nothing pending is wanted; the worker exits after what it is running.
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=True)
