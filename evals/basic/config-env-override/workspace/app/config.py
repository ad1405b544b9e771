"""The settings of the app: defaults, then the file."""

from app.defaults import DEFAULTS
from app.errors import ConfigError
from app.loader import read_file


def convert(name, text):
    """``text`` as the type of setting ``name``'s default."""
    kind = type(DEFAULTS[name])
    try:
        if kind is bool:
            return {"true": True, "false": False}[text.lower()]
        return kind(text)
    except (KeyError, ValueError):
        raise ConfigError(f"{name}: {text!r} is not a {kind.__name__}") from None


def load_config(path=None):
    settings = dict(DEFAULTS)
    if path is not None:
        for name, text in read_file(path).items():
            if name not in DEFAULTS:
                raise ConfigError(f"{path}: unknown setting {name!r}")
            settings[name] = convert(name, text)
    return settings
