class ConfigError(Exception):
    """A setting that cannot be used; the message says which and why."""
