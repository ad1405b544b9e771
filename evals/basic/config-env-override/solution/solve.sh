#!/usr/bin/env bash
set -eu
cat > app/config.py <<'PY'
"""The settings of the app: defaults, then the file, then APP_<NAME> environment variables."""

import os

from app.defaults import DEFAULTS
from app.errors import ConfigError
from app.loader import read_file

_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
PREFIX = "APP_"


def convert(name, text, source=None):
    """``text`` as the type of setting ``name``'s default; ``source`` names it in an error."""
    kind = type(DEFAULTS[name])
    try:
        if kind is bool:
            return _BOOLEANS[text.strip().lower()]
        return kind(text)
    except (KeyError, ValueError):
        raise ConfigError(f"{source or name}: {text!r} is not a {kind.__name__}") from None


def load_config(path=None, environ=None):
    settings = dict(DEFAULTS)
    if path is not None:
        for name, text in read_file(path).items():
            if name not in DEFAULTS:
                raise ConfigError(f"{path}: unknown setting {name!r}")
            settings[name] = convert(name, text)
    environ = os.environ if environ is None else environ
    for name in DEFAULTS:
        variable = PREFIX + name.upper()
        if variable in environ:
            settings[name] = convert(name, environ[variable], variable)
    return settings
PY
