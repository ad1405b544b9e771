"""raas.toml: every bad key is named, with what was expected."""

from __future__ import annotations

import pytest

from shared.categories import Role
from shared.errors import InvalidInput
from shared.project_config import ProjectConfig, parse_project_config

pytestmark = pytest.mark.unit


def test_empty_file_gives_the_defaults() -> None:
    assert parse_project_config("") == ProjectConfig()


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ('[sandbox]\nmemory = "lots"', ["raas.toml: sandbox.memory", "'lots' is not a size", '"1g"']),
        ('max_iterations = "many"', ["raas.toml: max_iterations", "valid integer", "'many'"]),
        ("max_iterations = 0", ["max_iterations", "greater than or equal to 1"]),
        ("colour = 1", ["raas.toml: colour", "unknown key; keys: name, workflow,"]),
        ("[budget]\nlimit_usd = -1", ["budget.limit_usd", "greater than or equal to 0"]),
        ('model = "gpt-9"', ["model 'gpt-9' has no price", "[pricing.'gpt-9']"]),
        ("name = ", ["raas.toml: not valid TOML"]),
        ('default_ignore = ["*.log\\n*.tmp"]', ["raas.toml: default_ignore", "not one gitignore pattern"]),
        ('validator = "builder"', ["raas.toml: validator", "'builder' is not one whose role is validator"]),
        ('[categories.review]\nrole = "judge"', ["raas.toml: categories.review.role", "'judge'"]),
    ],
)
def test_bad_raas_toml_names_the_key_and_the_expected_type(text: str, fragments: list[str]) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_project_config(text)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_an_unlisted_model_is_accepted_with_a_price_override() -> None:
    config = parse_project_config('model = "my-model"\n[pricing.my-model]\ninput = 1\noutput = 2\n')
    assert config.model == "my-model"


def test_a_category_of_ones_own_can_take_the_validators_role() -> None:
    config = parse_project_config('validator = "review"\n[categories.review]\nrole = "validator"\n')

    assert config.role_of("review") is Role.VALIDATOR
    assert config.categories_in(Role.VALIDATOR) == ["review", "validator"]
    assert config.role_of("mine") is Role.BUILDER  # a category nobody configured builds
