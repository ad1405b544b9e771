#!/usr/bin/env bash
set -eu
cat > retry.py <<'PY'
"""Retrying a flaky call."""

import functools
import time


def retry(attempts=3, on=(Exception,), delay_s=0.1, sleep=time.sleep):
    """Call the function up to ``attempts`` times while it raises one of ``on``."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            delay = delay_s
            for attempt in range(1, attempts + 1):
                try:
                    return func(*args, **kwargs)
                except on:
                    if attempt == attempts:
                        raise
                    sleep(delay)
                    delay *= 2
            raise AssertionError("unreachable")

        return wrapper

    return decorate
PY
