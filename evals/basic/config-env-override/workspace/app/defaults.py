"""Every setting and its default; the default's type is the setting's type."""

DEFAULTS = {
    "host": "127.0.0.1",
    "port": 8080,
    "debug": False,
    "timeout_s": 2.5,
    "workers": 4,
}
