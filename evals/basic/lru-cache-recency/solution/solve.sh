#!/usr/bin/env bash
set -eu
cat > lru.py <<'PY'
"""A least-recently-used cache."""

from collections import OrderedDict


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._values = OrderedDict()

    def get(self, key, default=None):
        if key not in self._values:
            return default
        self._values.move_to_end(key)
        return self._values[key]

    def put(self, key, value):
        if key in self._values:
            self._values.move_to_end(key)
        self._values[key] = value
        if len(self._values) > self.capacity:
            self._values.popitem(last=False)

    def __len__(self):
        return len(self._values)

    def __contains__(self, key):
        return key in self._values
PY
