"""A least-recently-used cache."""


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self._keys = []
        self._values = {}

    def get(self, key, default=None):
        return self._values.get(key, default)

    def put(self, key, value):
        if len(self._keys) >= self.capacity:
            oldest = self._keys.pop(0)
            del self._values[oldest]
        self._keys.append(key)
        self._values[key] = value

    def __len__(self):
        return len(self._values)

    def __contains__(self, key):
        return key in self._values
