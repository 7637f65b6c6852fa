"""Ported from the reference's ``ts/packages/core/test/retry.test.ts``: the retry arithmetic.

The reference's ``backoffFor(policy, n)`` is the wait before attempt ``n``;
Python's ``RetryPolicy.delay(n)`` is the wait after failed attempt ``n``, so
the one is the other shifted by one (``_wait_before``). Times are seconds, not
milliseconds. Python's defaults differ on purpose (SPEC §5:
``max_attempts=3, backoff=0.2, factor=2.0``), so each case spells out the
fields the reference leaves at its defaults (one attempt, no backoff,
factor 1). Not ported: "a non-Error throw is still a candidate" — Python can
only raise exceptions.
"""

from __future__ import annotations

import pytest

from ilmek import RetryPolicy


def _wait_before(policy: RetryPolicy, attempt: int) -> float:
    """Seconds slept before ``attempt`` (2 is the first retry): the reference's ``backoffFor``."""
    return policy.delay(attempt - 1)


# --- the wait between attempts --------------------------------------------------------------


def test_the_wait_is_zero_when_no_backoff_is_configured() -> None:
    """retry.test.ts · "is zero when no backoff is configured" (Python: 0.2 s unless set)."""
    policy = RetryPolicy(max_attempts=3, backoff=0)

    assert [0, 0] == [_wait_before(policy, 2), _wait_before(policy, 5)]


@pytest.mark.parametrize("backoff", [0, -1])
def test_a_non_positive_backoff_short_circuits_to_zero(backoff: float) -> None:
    """retry.test.ts · "a non-positive backoff short-circuits to zero"."""
    assert 0 == _wait_before(RetryPolicy(max_attempts=3, backoff=backoff, factor=2), 3)


def test_with_a_factor_of_one_the_wait_is_constant() -> None:
    """retry.test.ts · "without a factor the delay is constant" (Python: factor 2 unless set)."""
    policy = RetryPolicy(max_attempts=4, backoff=0.1, factor=1)

    assert [0.1, 0.1, 0.1] == [_wait_before(policy, n) for n in (2, 3, 4)]


def test_the_first_retry_waits_exactly_the_backoff() -> None:
    """retry.test.ts · "the first retry (attempt 2) waits exactly backoffMs"."""
    assert 0.1 == _wait_before(RetryPolicy(max_attempts=5, backoff=0.1, factor=2), 2)


def test_the_wait_grows_geometrically_from_there() -> None:
    """retry.test.ts · "the delay grows geometrically from there"."""
    policy = RetryPolicy(max_attempts=5, backoff=0.1, factor=2)

    assert [0.1, 0.2, 0.4, 0.8] == [_wait_before(policy, n) for n in (2, 3, 4, 5)]


def test_max_backoff_caps_the_computed_wait() -> None:
    """retry.test.ts · "maxBackoffMs caps the computed delay"."""
    policy = RetryPolicy(max_attempts=6, backoff=0.1, factor=10, max_backoff=0.5)

    assert [0.1, 0.5, 0.5] == [_wait_before(policy, n) for n in (2, 3, 4)]


def test_a_cap_below_the_base_clamps_the_very_first_retry() -> None:
    """retry.test.ts · "a cap below the base clamps the very first retry"."""
    assert 0.01 == _wait_before(RetryPolicy(max_attempts=3, backoff=0.1, factor=1, max_backoff=0.01), 2)


def test_a_fractional_factor_decays() -> None:
    """retry.test.ts · "a fractional factor decays"."""
    policy = RetryPolicy(max_attempts=4, backoff=0.1, factor=0.5)

    assert [0.1, 0.05, 0.025] == [_wait_before(policy, n) for n in (2, 3, 4)]


# --- whether to retry ----------------------------------------------------------------------


def test_a_policy_of_one_attempt_never_retries() -> None:
    """retry.test.ts · "the default policy of one attempt never retries" (Python: 3 unless set)."""
    assert not RetryPolicy(max_attempts=1).should_retry(1, RuntimeError("boom"))


def test_it_retries_while_attempts_remain() -> None:
    """retry.test.ts · "retries while attempts remain"."""
    policy = RetryPolicy(max_attempts=3)

    assert [True, True, False] == [policy.should_retry(n, RuntimeError("boom")) for n in (1, 2, 3)]


def test_max_attempts_counts_the_first_try() -> None:
    """retry.test.ts · "maxAttempts counts the first try, so N attempts means N-1 retries"."""
    policy = RetryPolicy(max_attempts=2)

    assert [True, False] == [policy.should_retry(n, RuntimeError("boom")) for n in (1, 2)]


def test_an_attempt_past_the_limit_still_refuses() -> None:
    """retry.test.ts · "an attempt past the limit still refuses"."""
    assert not RetryPolicy(max_attempts=3).should_retry(99, RuntimeError("boom"))


def test_retry_on_selects_which_errors_are_worth_another_attempt() -> None:
    """retry.test.ts · "retryOn selects which errors are worth another attempt"."""
    policy = RetryPolicy(max_attempts=3, retry_on=lambda error: isinstance(error, TypeError))

    assert policy.should_retry(1, TypeError("flaky"))
    assert not policy.should_retry(1, ValueError("fatal"))


def test_retry_on_cannot_extend_the_attempt_budget() -> None:
    """retry.test.ts · "retryOn cannot extend the attempt budget"."""
    assert not RetryPolicy(max_attempts=2, retry_on=lambda error: True).should_retry(2, RuntimeError("boom"))


def test_retry_on_is_consulted_only_while_attempts_remain() -> None:
    """retry.test.ts · "retryOn is consulted only while attempts remain"."""
    consulted: list[BaseException] = []

    def retry_on(error: BaseException) -> bool:
        consulted.append(error)
        return True

    RetryPolicy(max_attempts=2, retry_on=retry_on).should_retry(2, RuntimeError("boom"))

    assert [] == consulted
