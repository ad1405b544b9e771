"""Semantic versions."""


def parse(version):
    """The parts of a version string, for sorting."""
    return version.split(".")


def newest(versions):
    """The highest of the given version strings."""
    return max(versions, key=parse)
