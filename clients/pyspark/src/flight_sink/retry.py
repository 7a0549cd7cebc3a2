"""Bounded retries with exponential backoff for transient server unavailability."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from .errors import FlightSinkError, InvalidArgumentError

__all__ = ["RetryPolicy"]

T = TypeVar("T")
log = logging.getLogger("flight_sink")


@dataclass(frozen=True)
class RetryPolicy:
    """How idempotent calls are retried when the server is transiently unavailable.

    A call is retried only when it failed with a retryable status
    (:attr:`flight_sink.FlightSinkError.retryable`: ``Unavailable``, the server is down,
    restarting or unreachable; ``Aborted``, a commit lost the race for a version too often;
    ``ResourceExhausted`` for ``--max-concurrent-puts`` or MemWAL ``BACKPRESSURE``) and only if
    the call is safe to repeat: :meth:`~flight_sink.Client.write`, epoch writes,
    ``commit_epoch`` and the read-only calls. Plain appends (:meth:`flight_sink.Client.put`) and
    ``create_table`` are never retried.

    Sleeps grow ``initial_backoff * multiplier**n`` up to ``max_backoff``, each drawn uniformly
    from its upper half (jitter, so clients that failed together do not return together). The
    call gives up once the next attempt would start more than ``max_elapsed`` seconds after the
    first, or after ``max_attempts`` attempts, and raises the last error. The default rides out
    a server restart of up to a minute: attempts every 1-2 s after the first few, for 60 s.

    Attributes:
        max_attempts: attempts in total, including the first (1 disables retries).
        initial_backoff: the first sleep, in seconds.
        max_backoff: the largest sleep, in seconds.
        multiplier: growth of the sleep per attempt.
        max_elapsed: no attempt starts later than this many seconds after the first.
    """

    max_attempts: int = 1000
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    max_elapsed: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidArgumentError("max_attempts must be >= 1")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise InvalidArgumentError("backoffs must be >= 0 and multiplier >= 1")

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_attempts=1)

    def backoff(self, attempt: int) -> float:
        """The sleep before attempt ``attempt + 1`` (attempt counts from 1), with full jitter."""
        cap = min(self.max_backoff, self.initial_backoff * (self.multiplier ** (attempt - 1)))
        return random.uniform(cap / 2, cap)

    def call(self, what: str, fn: Callable[[], T], can_retry: Callable[[], bool] = lambda: True) -> T:
        """Run ``fn``, retrying retryable :class:`FlightSinkError` s as this policy allows.

        Args:
            what: a description for the log.
            fn: the call; it raises :class:`FlightSinkError` on failure.
            can_retry: asked before each retry (e.g. "can the data still be replayed?").
        """
        start = time.monotonic()
        attempt = 1
        next_warning = 0.0
        while True:
            try:
                return fn()
            except FlightSinkError as e:
                if not e.retryable or attempt >= self.max_attempts or not can_retry():
                    raise
                sleep = self.backoff(attempt)
                if time.monotonic() - start + sleep > self.max_elapsed:
                    raise
                # A warning for the first retry and then one every 10 s; the others at debug level.
                elapsed = time.monotonic() - start
                level = logging.WARNING if attempt == 1 or elapsed >= next_warning else logging.DEBUG
                if level == logging.WARNING:
                    next_warning = elapsed + 10.0
                log.log(
                    level,
                    "%s failed (%s), retry %d in %.2fs, %.0fs after the first attempt (giving up at %.0fs)",
                    what, e.code, attempt, sleep, elapsed, self.max_elapsed,
                )
                time.sleep(sleep)
                attempt += 1
