"""The run's hold while the run lasts: renewed wherever the driver waits, and cancel requests heard.

The backend's :class:`~ilmek.checkpoint.holds.Hold` knows how to renew and
confirm itself; :class:`HoldKeeper` is the run's side of it: when to renew,
what a failed renewal means for the run (nothing yet: the loss is seen at
the next write), and what a cancel request stored on the hold does (it
sets the run's cancel event).
"""

from __future__ import annotations

import contextlib
import time

from ..checkpoint.holds import Hold, HoldLostError
from ..errors import IlmekError
from ..logs import logger
from .setup import RunSetup

#: How long a run that ends waits for its running steps, before it hands its
#: hold over, when the hold has no lease (one kept in this process's memory).
_UNLEASED_WAIT = 5.0

#: How long the driver waits before it tries again a renewal that failed
#: (the database is away): it must not spin on the failure.
_RENEW_RETRY_SECONDS = 0.1

_WARNING, _DEBUG = 30, 10  # logging's levels, without importing logging before it logs

__all__ = ["HoldKeeper"]


class HoldKeeper:
    """Keeps one run's hold on its thread while the run drives it."""

    def __init__(self, setup: RunSetup, hold: Hold) -> None:
        self._setup = setup
        self.hold = hold
        hold.on_cancel = self._cancel_requested
        #: No renewal is tried again before this monotonic time (one just failed).
        self._retry_after = 0.0
        #: Whether a failed renewal was logged at WARNING, since the last one that worked.
        self._failure_logged = False

    def _cancel_requested(self, reason: str) -> None:
        """Another process asked the run to stop (seen by a fenced write or a renewal)."""
        cancel = self._setup.cancel
        if getattr(cancel, "reason", None) is None:
            with contextlib.suppress(AttributeError):
                cancel.reason = reason  # type: ignore[attr-defined]
        cancel.set()

    def seconds_until_renewal(self) -> float | None:
        """How long the driver may wait before it must renew (``None``: never)."""
        wait = self.hold.seconds_until_renewal()
        if wait is None:
            return None
        return max(wait, self._retry_after - time.monotonic())

    def keep(self) -> None:
        """Renew the hold when due, wherever the driver waits; a loss is seen at the next write.

        A lost hold was logged once when it was found lost, and is not renewed
        again. A renewal that fails otherwise (the database is away) is tried
        again a moment later, logged at WARNING the first time only.
        """
        if time.monotonic() < self._retry_after:
            return
        try:
            self.hold.renew_if_due()
        except HoldLostError:
            return
        except IlmekError as error:
            self._retry_after = time.monotonic() + _RENEW_RETRY_SECONDS
            logger("ilmek.run").log(
                _DEBUG if self._failure_logged else _WARNING,
                "could not renew the hold on %r (trying again while its lease lasts): %s",
                self._setup.thread_id,
                error,
                extra={"thread_id": self._setup.thread_id},
            )
            self._failure_logged = True
            return
        self._failure_logged = False

    def abort_reason(self) -> str:
        """Why the run was cancelled: the caller's reason, a stored request's, or ``aborted``."""
        reason = getattr(self._setup.cancel, "reason", None)
        if reason is None:
            reason = self.hold.cancel_reason
        if isinstance(reason, BaseException):
            return str(reason) or type(reason).__name__
        return str(reason) if reason is not None else "aborted"

    def can_outlive_run(self) -> bool:
        """Whether the hold can be kept, and given back, without the thread that drives the run.

        True where its storage may be used from any thread: the process's
        keeper renews it, and a step still running when the run ends records
        itself and gives the thread back once it returns.
        """
        return self.hold.any_thread

    def close_wait(self) -> float | None:
        """How long a run that ends waits for its running steps (``None``: until they return).

        A hold that can outlive the run is kept by the driver for one lease,
        then handed over (so a closed stream returns promptly); one bound to
        the driving thread can be kept by nobody else, so the end waits.
        """
        if not self.can_outlive_run():
            return None
        lease = self.hold.lease_seconds
        return lease if lease is not None else _UNLEASED_WAIT

    def let_go(self, *, stopped: bool) -> bool:
        """Give the thread back once the run's steps ``stopped``; else say who keeps the hold.

        Returns:
            Whether the hold is kept past the run: the caller gives it back
            once the last running step returns and is recorded.
        """
        hold = self.hold
        thread_id = self._setup.thread_id
        if not stopped and not hold.released:
            if self.can_outlive_run():
                logger("ilmek.run").warning(
                    "a step of thread %r was still running when its run ended; the thread stays held "
                    "(its hold kept) and is given back once it returns and its record is written",
                    thread_id,
                    extra={"thread_id": thread_id},
                )
                return True
            lapses = (
                "ends with the caller's transaction"
                if hold.lease_seconds is None
                else f"lapses within {hold.lease_seconds:g} s"
            )
            logger("ilmek.run").warning(
                "the run of thread %r was interrupted while a step was still running; its hold is no longer "
                "kept and %s, after which another run may take the thread and repeat that step if it is "
                "still running",
                thread_id,
                lapses,
                extra={"thread_id": thread_id},
            )
            hold.abandon()
            return False
        try:
            hold.release()
        except Exception as error:
            logger("ilmek.run").warning(
                "could not give back the hold on thread %r (it lapses with its lease): %s",
                thread_id,
                error,
                extra={"thread_id": thread_id},
            )
        return False
