"""Eval suites, configurations and the report's numbers (issue #27), without services.

Bad input is refused in one line naming what is wrong (a task without tests/test.sh, a config that
does not parse, duplicate task ids, -k 0), before anything starts; the statistics match values
worked out by hand.
"""

from __future__ import annotations

import shutil
import tomllib
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.evals import stats
from orchestrator.evals.configs import attempt_cap, attempt_config, parse_config, read_configs, to_toml
from orchestrator.evals.suite import load_suite
from shared.errors import InvalidInput
from shared.project_config import ProjectConfig

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "evals"


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "four"
    shutil.copytree(FIXTURES / "four", root)
    return root


def test_the_fixture_suite_loads_with_its_tasks_metadata_and_a_stable_digest(suite: Path) -> None:
    loaded = load_suite(suite)
    assert loaded.name == "four"
    assert [t.key for t in loaded.tasks] == ["broken-env", "fix-bad", "fix-bug", "never"]
    broken = loaded.tasks[0]
    assert broken.environment is not None
    assert broken.environment.setup == "exit 3"
    assert broken.meta.budget_usd == Decimal("0.50")
    assert broken.describe(loaded.root)["path"] == "broken-env"
    assert load_suite(suite).digest == loaded.digest
    (suite / "never" / "workspace" / "answer.txt").write_text("HARDER\n")
    assert load_suite(suite).digest != loaded.digest


def test_a_task_without_its_hidden_test_is_refused_by_name(suite: Path) -> None:
    (suite / "fix-bad" / "tests" / "test.sh").unlink()
    with pytest.raises(InvalidInput, match=r"^four/fix-bad: no tests/test.sh \(the hidden test"):
        load_suite(suite)


def test_two_tasks_with_one_id_are_refused(suite: Path) -> None:
    (suite / "group").mkdir()
    shutil.copytree(suite / "never", suite / "group" / "never")
    with pytest.raises(InvalidInput, match="duplicate task id 'never' .*must be unique"):
        load_suite(suite)


def test_a_task_toml_that_does_not_parse_is_refused(suite: Path) -> None:
    (suite / "fix-bug" / "task.toml").write_text("[task\n")
    with pytest.raises(InvalidInput, match="^four/fix-bug/task.toml: not valid TOML"):
        load_suite(suite)
    (suite / "fix-bug" / "task.toml").write_text('[task]\ndifficulty = "trivial"\n')
    with pytest.raises(InvalidInput, match="four/fix-bug/task.toml"):
        load_suite(suite)


def test_a_folder_without_suite_toml_is_not_a_suite(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no suite.toml"):
        load_suite(tmp_path)


def test_a_config_that_does_not_parse_or_has_an_unknown_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="^config a: not valid TOML"):
        parse_config("a", "model = \n")
    with pytest.raises(InvalidInput, match="^config b: .*modle"):
        parse_config("b", 'modle = "claude-sonnet-4-6"\n')
    (tmp_path / "x.toml").write_text("max_iterations = 1\n")
    with pytest.raises(InvalidInput, match="two configs are named 'x'"):
        read_configs([tmp_path / "x.toml", tmp_path / "x.toml"])


def test_an_attempts_raas_toml_carries_the_task_environment_time_limit_and_the_smallest_cap(
    suite: Path,
) -> None:
    loaded = load_suite(suite)
    task = loaded.tasks[0].describe(loaded.root)
    config = parse_config("b", 'max_iterations = 2\nmodel = "claude-sonnet-4-6"\n[budget]\nlimit_usd = 0.3\n')
    assert attempt_cap(task, config, None) == Decimal("0.3")
    assert attempt_cap(task, config, Decimal("0.1")) == Decimal("0.1")
    data = attempt_config(task, config, Decimal("0.3"), 'eval "four"/broken-env b #1')
    parsed = ProjectConfig.model_validate(tomllib.loads(to_toml(data)))
    assert parsed.name == 'eval "four"/broken-env b #1'
    assert parsed.budget.limit_usd == Decimal("0.3")
    assert parsed.environment.setup == "exit 3"
    assert parsed.circuit_breaker.timeout_s == 300
    assert parsed.max_iterations == 2


def test_run_refuses_k_zero_and_a_bad_config_in_one_line_before_anything_is_sent(
    suite: Path, tmp_path: Path
) -> None:
    # No coordinator answers here: a refusal that reached the network would say so instead.
    good, bad = tmp_path / "a.toml", tmp_path / "bad.toml"
    good.write_text("max_iterations = 1\n")
    bad.write_text("max_iterations = [\n")
    runner = CliRunner()
    cases = [
        (["-k", "0", "--config", str(good)], "error: -k 0: give at least 1 attempt per task and config"),
        (["--config", str(bad)], "error: config bad: not valid TOML"),
    ]
    for args, expected in cases:
        result = runner.invoke(app, ["eval", "run", str(suite), *args])
        assert result.exit_code != 0
        assert isinstance(result.exception, InvalidInput)
        assert f"error: {result.exception}".startswith(expected)
    (suite / "never" / "tests" / "test.sh").unlink()
    result = runner.invoke(app, ["eval", "run", str(suite), "--config", str(good)])
    assert isinstance(result.exception, InvalidInput)
    assert "four/never: no tests/test.sh" in str(result.exception)


def test_pass_at_k_and_pass_hat_k_match_hand_computed_values() -> None:
    # n=5 attempts, c=2 correct, k=2: pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2) = 1/10.
    assert stats.pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert stats.pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert stats.pass_at_k(2, 0, 2) == 0.0
    assert stats.pass_at_k(2, 1, 2) == 1.0
    assert stats.pass_hat_k(2, 1, 2) == 0.0
    outcomes = {"a": [True, True], "b": [True, False], "c": [False, False]}
    assert stats.mean_over_tasks(outcomes, 2, "at") == pytest.approx(2 / 3)
    assert stats.mean_over_tasks(outcomes, 2, "hat") == pytest.approx(1 / 3)
    assert stats.resolve_rate(outcomes) == pytest.approx(0.5)


def test_the_bootstrap_interval_holds_the_rate_and_is_zero_wide_when_every_task_agrees() -> None:
    mixed = {f"t{i}": [i % 2 == 0, i % 3 == 0] for i in range(30)}
    interval = stats.bootstrap_interval(mixed)
    assert interval is not None
    assert interval[0] < 25 / 60 < interval[1]
    assert stats.resolve_rate(mixed) == pytest.approx(25 / 60)  # 15 even + 10 multiples of 3
    assert stats.bootstrap_interval({"a": [True], "b": [True]}) == (1.0, 1.0)
    assert stats.bootstrap_interval({}) is None


def test_mcnemar_exact_is_the_two_sided_binomial_of_the_discordant_pairs() -> None:
    # 0 vs 6 discordant: 2 * (1/2)^6 = 1/32.
    assert stats.mcnemar_exact(0, 6) == pytest.approx(1 / 32)
    # 1 vs 5: 2 * (C(6,0) + C(6,1)) / 2^6 = 2 * 7/64.
    assert stats.mcnemar_exact(1, 5) == pytest.approx(14 / 64)
    assert stats.mcnemar_exact(3, 3) == 1.0
    assert stats.mcnemar_exact(0, 0) == 1.0


def test_the_paired_bootstrap_sees_b_better_when_b_wins_every_pair() -> None:
    pairs = {f"t{i}": [(False, True), (False, True)] for i in range(10)}
    low, high, p = stats.paired_bootstrap(pairs) or (0.0, 0.0, 0.0)
    assert (low, high, p) == (1.0, 1.0, 0.0)
    same = {f"t{i}": [(True, True)] for i in range(10)}
    assert stats.paired_bootstrap(same) == (0.0, 0.0, 1.0)
