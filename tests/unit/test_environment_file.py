"""``.raas/environment.toml`` in the workspace: read when raas.toml has no ``[environment]`` of its
own, and a bad one is one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.scheduling.submission import check_network, with_environment_file
from shared.errors import InvalidInput
from shared.project_config import parse_project_config
from shared.project_config.environment import EnvironmentConfig, NetworkLevel
from workers.environment import SetupFailed, read_environment

pytestmark = pytest.mark.unit


def _workspace(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".raas").mkdir()
    (tmp_path / ".raas" / "environment.toml").write_text(text, encoding="utf-8")
    return tmp_path


def test_the_workspace_file_is_read_when_raas_toml_gives_no_environment(tmp_path: Path) -> None:
    workdir = _workspace(tmp_path, 'setup = "make deps"\nnetwork = "registries"\n')
    env = read_environment(EnvironmentConfig(), workdir)
    assert env.setup == "make deps"
    assert env.network is NetworkLevel.REGISTRIES


def test_raas_toml_environment_wins_over_the_workspace_file(tmp_path: Path) -> None:
    workdir = _workspace(tmp_path, 'setup = "make deps"\n')
    own = EnvironmentConfig(setup="pip install -r requirements.txt")
    assert read_environment(own, workdir) is own


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('network = "internet"', ".raas/environment.toml: network: "),
        ('key_files = ["../../etc/shadow"]', "key file '../../etc/shadow' is outside the workspace"),
        ("setup = ", ".raas/environment.toml: not valid TOML"),
    ],
)
def test_a_bad_workspace_file_is_one_line_naming_it(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(SetupFailed) as caught:
        read_environment(EnvironmentConfig(), _workspace(tmp_path, text + "\n"))
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_submission_reads_the_workspace_file_into_the_projects_config(tmp_path: Path) -> None:
    workdir = _workspace(tmp_path, 'setup = "make deps"\nkey_files = ["Makefile"]\n')
    config = with_environment_file(workdir, parse_project_config(""))
    assert config.environment.setup == "make deps"
    assert config.environment.key_files == ["Makefile"]


def test_a_bad_workspace_file_is_refused_at_submission_in_one_line(tmp_path: Path) -> None:
    workdir = _workspace(tmp_path, 'network = "internet"\n')
    with pytest.raises(InvalidInput) as caught:
        with_environment_file(workdir, parse_project_config(""))
    assert str(caught.value).startswith(".raas/environment.toml: network: ")


@pytest.mark.parametrize("key", ["network", "setup_network"])
def test_full_network_is_refused_at_submission_where_the_cluster_allows_none(key: str) -> None:
    config = parse_project_config(f'[environment]\n{key} = "full"\n')
    check_network(config, network_allowed=True)
    with pytest.raises(InvalidInput) as caught:
        check_network(config, network_allowed=False)
    assert f'[environment] {key} = "full" is not allowed on this cluster' in str(caught.value)
