"""Retrying a flaky call."""

import functools
import time


def retry(attempts=3, on=(Exception,), delay_s=0.1, sleep=time.sleep):
    """Call the function up to ``attempts`` times while it raises one of ``on``."""

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            delay = delay_s
            for _ in range(attempts - 1):
                try:
                    return func(*args, **kwargs)
                except Exception:
                    sleep(delay)
                    delay *= 2
            return None

        return wrapper

    return decorate
