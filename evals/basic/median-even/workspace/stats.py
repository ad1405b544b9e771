"""Descriptive statistics."""


def mean(values):
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def median(values):
    return values[len(values) // 2]
