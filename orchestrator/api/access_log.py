"""The access log without query strings.

A query string can carry what must never be logged: ``POST /v1/projects?repo=`` with a
credential in the URL is refused by the route, but uvicorn has logged the request line by then.
The path alone says which route was hit; the arguments belong to the route's own log lines,
which scrub what they log.
"""

from __future__ import annotations

import logging

ACCESS_LOGGER = "uvicorn.access"


class DropQueryStrings(logging.Filter):
    """Cut the query string from uvicorn's access records (their third argument is the path)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0] + "?…", *args[3:])
        return True


def drop_query_strings() -> None:
    """Install the filter on the access logger once, however many apps a process builds."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(existing, DropQueryStrings) for existing in logger.filters):
        logger.addFilter(DropQueryStrings())
