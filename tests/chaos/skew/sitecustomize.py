"""Test-only: a worker whose machine clock is off. With $CHAOS_CLOCK_SKEW (seconds, may be
negative) set, time.time() in every process started with this directory on PYTHONPATH answers
that much ahead of the real clock (time.monotonic is left alone, as NTP leaves it).

The Chaos job's log lines are written with the skewed clock too; the scenario takes the skew
off when it reads them (tests/chaos/scenarios/skew.py)."""

import os
import time

_SKEW = float(os.environ.get("CHAOS_CLOCK_SKEW") or 0)
if _SKEW:
    _real = time.time
    time.time = lambda: _real() + _SKEW
