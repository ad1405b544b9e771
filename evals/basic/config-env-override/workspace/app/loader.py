"""Reading the INI file: one [app] section of name = value lines."""

import configparser

from app.errors import ConfigError


def read_file(path):
    """The raw (string) values of the [app] section of ``path``."""
    parser = configparser.ConfigParser()
    if not parser.read(path):
        raise ConfigError(f"{path}: no such file")
    return dict(parser["app"]) if parser.has_section("app") else {}
