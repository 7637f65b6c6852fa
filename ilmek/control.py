"""What nodes and routers return to steer a run: sends, commands, retry policies."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from . import checks
from .errors import InvalidArgumentError

__all__ = ["Command", "RetryPolicy", "Send", "command", "send"]


@attrs.frozen
class Send:
    """One task of ``node`` in the next superstep, whose state is ``input``."""

    node: str
    input: Any = None


def send(node: str, input: Any = None) -> Send:  # noqa: A002 - the spec's name
    """Schedule one task of ``node`` in the next superstep with ``input`` as its state.

    Return sends from a router or in a command's ``goto``; the n-th send to a
    node in a superstep runs as task ``node#n`` with its own journal.
    """
    if not isinstance(node, str) or not node:
        raise TypeError(f"send() needs a node name, got {node!r}")
    return Send(node, input)


@attrs.frozen
class Command:
    """A node's update together with where the run goes next."""

    update: Mapping[str, Any] | None = None
    goto: str | Send | Sequence[str | Send] | None = None


def command(
    update: Mapping[str, Any] | None = None,
    goto: str | Send | Sequence[str | Send] | None = None,
) -> Command:
    """Return from a node to write ``update`` and choose the next nodes.

    ``goto`` (a node name, ``END``, a :func:`send`, or a list of them)
    replaces the node's static edges for this superstep and is planned after
    ``update`` is folded in. Without ``goto`` the static edges apply.
    """
    return Command(update, goto)


def _check_attempts(instance: RetryPolicy, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise InvalidArgumentError(f"RetryPolicy.max_attempts must be at least 1, got {value}")


def _check_seconds(instance: RetryPolicy, attribute: attrs.Attribute[float], value: float) -> None:
    checks.seconds(value, f"RetryPolicy.{attribute.name}")


def _check_backoff(instance: RetryPolicy, attribute: attrs.Attribute[float], value: float) -> None:
    # As in the reference (retry.test.ts), a zero or negative backoff means no wait;
    # only a wait no thread could keep (infinite, NaN, past TIMEOUT_MAX) is refused.
    checks.number(value, "RetryPolicy.backoff", minimum=-checks.MAX_SECONDS, unit=" of seconds")


def _check_factor(instance: RetryPolicy, attribute: attrs.Attribute[float], value: float) -> None:
    checks.number(value, "RetryPolicy.factor")


def _check_jitter(instance: RetryPolicy, attribute: attrs.Attribute[float], value: float) -> None:
    checks.number(value, "RetryPolicy.jitter", maximum=1.0)


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a failing node is re-run within its superstep.

    Completed ``ctx.step`` calls replay from the journal on every attempt, so a
    retry never repeats a recorded side effect.

    Attributes:
        max_attempts: Runs of the body in all, the first included.
        backoff: Seconds before the first retry.
        factor: Each later wait is this many times the one before.
        max_backoff: The longest wait between attempts, in seconds.
        jitter: Each wait is drawn uniformly from ``[wait * (1 - jitter), wait]``
            so that many failing runs do not retry in step (from 0 to 1).
        retry_on: ``retry_on(exc) -> bool`` may veto a retry; ``None`` retries
            every ``Exception``.

    The waits and the factor are finite numbers from 0 to
    ``threading.TIMEOUT_MAX``; anything else (infinite, NaN, negative) raises
    :class:`~ilmek.errors.InvalidArgumentError`.
    """

    max_attempts: int = attrs.field(default=3, validator=_check_attempts)
    backoff: float = attrs.field(default=0.2, validator=_check_backoff)
    factor: float = attrs.field(default=2.0, validator=_check_factor)
    max_backoff: float = attrs.field(default=30.0, validator=_check_seconds)
    jitter: float = attrs.field(default=0.0, validator=_check_jitter)
    retry_on: Callable[[BaseException], bool] | None = attrs.field(default=None, eq=False)

    def should_retry(self, attempt: int, error: BaseException) -> bool:
        """Whether a body that failed on ``attempt`` (1-based) runs again."""
        if attempt >= self.max_attempts:
            return False
        return self.retry_on is None or bool(self.retry_on(error))

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed ``attempt`` (1-based) before the next."""
        try:
            wait = min(self.backoff * self.factor ** (attempt - 1), self.max_backoff)
        except OverflowError:  # the growth passed any float: the longest wait it is
            wait = self.max_backoff if self.backoff > 0 else 0.0
        if self.jitter:
            import random  # on first use: ``import ilmek`` is 2 ms shorter without it

            wait *= 1 - self.jitter * random.random()
        return max(wait, 0.0)
