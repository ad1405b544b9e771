"""``[environment]`` of raas.toml: what a project may ask of its toolchain, and one line naming
what is wrong when it asks for something it cannot have."""

from __future__ import annotations

import pytest

from shared.errors import InvalidInput
from shared.project_config import parse_project_config
from shared.project_config.environment import NetworkLevel

pytestmark = pytest.mark.unit


def test_no_environment_by_default_means_the_plain_sandbox_without_network() -> None:
    env = parse_project_config("").environment
    assert not env.active
    assert env.network is NetworkLevel.NONE
    assert env.setup_network is NetworkLevel.REGISTRIES
    assert "pypi.org" in env.registries


def test_a_full_environment_table_is_read() -> None:
    text = """
[environment]
image = "constellation-sandbox:bookworm"
setup = "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"
key_files = ["requirements.txt"]
env = { PIP_INDEX_URL = "http://localhost:8080/simple" }
setup_network = "registries"
network = "none"
registries = ["localhost:8080"]
"""
    env = parse_project_config(text).environment
    assert env.active
    assert env.key_files == ["requirements.txt"]
    assert env.registries == ["localhost:8080"]


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('network = "internet"', "environment.network"),
        ('setup_network = "some"', "environment.setup_network"),
        ('key_files = ["../secrets.txt"]', "'../secrets.txt' is outside the workspace"),
        ('key_files = ["/etc/passwd"]', "'/etc/passwd' is outside the workspace"),
        ('dockerfile = "../Dockerfile"', "dockerfile '../Dockerfile' is outside the workspace"),
        ('env = { PATH = "/x" }', "'PATH' is not a variable a project may set"),
        ('registries = ["http://pypi.org/"]', "is not a host name"),
        ('image = "a"\ndockerfile = "Dockerfile"', "give image or dockerfile, not both"),
        ("sudo = true", "environment.sudo: unknown key"),
    ],
)
def test_bad_environment_is_one_line_naming_it(table: str, named: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_project_config(f"[environment]\n{table}\n")
    message = str(caught.value)
    assert named in message
    assert "\n" not in message
