"""The console's runs off the request: a small, bounded pool of threads that recover and resume.

A Recover (or an answer) runs the graph to its end or its next pause, which
may take as long as the graph likes. The console hands that run to this
pool and waits only a moment (:data:`QUICK_SECONDS`): a run that ends by
then is shown as it ended; a longer one goes on in the console's process
while the request returns, and the thread page says so and refreshes itself
until the run gives the thread back.

The pool runs at most ``workers`` runs at once (two unless told otherwise);
one more is refused with a message, never queued without bound. Its runs
are runs of the console's process: :func:`ilmek.drain` (the host's SIGTERM
handler; ``ilmek web`` on Ctrl-C or SIGTERM) stops them at their next
superstep boundary like any other, and :meth:`Background.close` asks them
to stop the same way and waits for them to commit and give their threads
back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from ..checkpoint.holds import holder_of, new_token

__all__ = ["QUICK_SECONDS", "Background", "console_process", "held_here"]

QUICK_SECONDS = 0.5
"""How long a request waits for the run it handed off: quick runs answer in the same page."""

STOP_REASON = "the web console stopped"
"""The reason recorded on a thread whose run :meth:`Background.close` stopped."""

Work = Callable[[threading.Event], object]


def console_process() -> str:
    """How the console's own process is named on its pages: ``the console's process (pid N)``."""
    return f"the console's process (pid {os.getpid()})"


def held_here(held_by: str | None) -> bool:
    """Whether a thread's holder (``ThreadInfo.held_by``) is the console's own process."""
    return held_by is not None and held_by == holder_of(new_token())


class Background:
    """A bounded pool of the console's runs, one at most per thread."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ilmek-console-run")
        self._lock = threading.Lock()
        self._running: dict[str, tuple[Future[object], threading.Event]] = {}

    def running(self, thread_id: str) -> bool:
        """Whether this console is running ``thread_id`` in the background now."""
        with self._lock:
            found = self._running.get(thread_id)
        return found is not None and not found[0].done()

    def start(self, thread_id: str, work: Work) -> Future[object] | str:
        """Run ``work(cancel)`` in the pool; its future, or why it was not started (a sentence)."""
        with self._lock:
            busy = {tid for tid, (future, _) in self._running.items() if not future.done()}
            if thread_id in busy:
                return f"The console is already running this thread in {console_process()}."
            if len(busy) >= self.workers:
                return (
                    f"The console is already running {len(busy)} runs (its limit); nothing was run. "
                    "Try again once one ends, or leave it to ilmek worker --recover-after."
                )
            cancel = threading.Event()
            future = self._pool.submit(work, cancel)
            self._running[thread_id] = (future, cancel)
        future.add_done_callback(lambda _: self._forget(thread_id, future))
        return future

    def _forget(self, thread_id: str, future: Future[object]) -> None:
        with self._lock:
            if self._running.get(thread_id, (None,))[0] is future:
                del self._running[thread_id]

    def close(self, wait: bool = True) -> None:
        """Ask every background run to stop at its next superstep boundary, then wait for them."""
        with self._lock:
            for _, cancel in self._running.values():
                cancel.reason = STOP_REASON  # type: ignore[attr-defined]
                cancel.set()
        self._pool.shutdown(wait=wait)


def quick_result(future: Future[object]) -> tuple[bool, object]:
    """``(True, value)`` when the run ended within :data:`QUICK_SECONDS` (re-raising its error), else
    ``(False, None)``: it goes on in the background."""
    try:
        return True, future.result(timeout=QUICK_SECONDS)
    except FutureTimeout:
        return False, None
