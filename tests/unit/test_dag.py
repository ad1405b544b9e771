"""The task DAG: validation messages a user can act on, waves, and what is ready to run."""

from __future__ import annotations

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.dag import TaskSpec, ready, validate_dag, waves
from shared.errors import InvalidInput

pytestmark = pytest.mark.unit


def spec(task_id: str, *deps: str) -> TaskSpec:
    return TaskSpec(id=task_id, title=f"Task {task_id}", depends_on=list(deps))


DIAMOND = [spec("d", "b", "c"), spec("b", "a"), spec("c", "a"), spec("a")]


def test_waves_of_a_diamond_run_the_two_middle_tasks_in_parallel() -> None:
    assert waves(DIAMOND) == [["a"], ["b", "c"], ["d"]]


def test_waves_sort_ids_within_a_wave_whatever_the_input_order() -> None:
    assert waves([spec("z"), spec("m"), spec("a")]) == [["a", "m", "z"]]


def test_waves_of_no_tasks_is_an_empty_plan() -> None:
    assert waves([]) == []


def test_a_task_sits_one_wave_after_its_latest_dependency() -> None:
    tasks = [spec("a"), spec("b", "a"), spec("c", "b"), spec("d", "a", "c")]
    assert waves(tasks) == [["a"], ["b"], ["c"], ["d"]]


def test_cycle_message_names_the_path_on_one_line() -> None:
    tasks = [spec("a", "b"), spec("b", "c"), spec("c", "a"), spec("x")]
    with pytest.raises(InvalidInput) as caught:
        validate_dag(tasks)
    message = str(caught.value)
    assert message == "tasks form a cycle: a -> b -> c -> a; remove one of these dependencies"


def test_cycle_reached_from_outside_names_only_the_cycle() -> None:
    tasks = [spec("start", "p"), spec("p", "q"), spec("q", "r"), spec("r", "p")]
    with pytest.raises(InvalidInput, match=r"cycle: p -> q -> r -> p;"):
        validate_dag(tasks)


def test_waves_refuse_a_cycle_with_the_same_message() -> None:
    with pytest.raises(InvalidInput, match=r"tasks form a cycle: a -> b -> a;"):
        waves([spec("a", "b"), spec("b", "a")])


def test_unknown_dependency_names_the_task_and_the_missing_id() -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_dag([spec("a"), spec("b", "zz")])
    assert str(caught.value) == "task 'b' depends on unknown task 'zz'"


def test_unknown_dependency_suggests_a_close_id() -> None:
    with pytest.raises(InvalidInput, match=r"unknown task 'auth:1\.3'; did you mean 'auth:1\.2'\?"):
        validate_dag([spec("auth:1.2"), spec("b", "auth:1.3")])


def test_duplicate_id_is_named() -> None:
    with pytest.raises(InvalidInput, match=r"^task 'a' is defined twice"):
        validate_dag([spec("a"), spec("b"), spec("a")])


def test_self_dependency_is_named() -> None:
    with pytest.raises(InvalidInput, match=r"^task 'a' depends on itself"):
        validate_dag([spec("a", "a")])


@pytest.mark.parametrize("bad_id", ["", "has space", "a/b", "ünï"])
def test_task_ids_are_restricted_to_a_safe_alphabet(bad_id: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        TaskSpec(id=bad_id, title="t")


def test_scud_style_ids_are_accepted() -> None:
    assert TaskSpec(id="auth:1.2", title="t").id == "auth:1.2"


def test_unknown_task_fields_are_rejected() -> None:
    with pytest.raises(pydantic.ValidationError):
        TaskSpec.model_validate({"id": "a", "title": "t", "dependson": ["b"]})


def test_ready_lists_tasks_whose_dependencies_are_all_done() -> None:
    assert ready(DIAMOND, done=set(), running=set()) == ["a"]
    assert ready(DIAMOND, done={"a"}, running=set()) == ["b", "c"]
    assert ready(DIAMOND, done={"a", "b"}, running=set()) == ["c"]
    assert ready(DIAMOND, done={"a", "b", "c"}, running=set()) == ["d"]


def test_ready_leaves_out_running_and_done_tasks() -> None:
    assert ready(DIAMOND, done={"a"}, running={"b"}) == ["c"]
    assert ready(DIAMOND, done={"a", "b", "c", "d"}, running=set()) == []


# --- properties -----------------------------------------------------------------------------


@st.composite
def random_dags(draw: st.DrawFn) -> list[TaskSpec]:
    """A random DAG: task i may depend only on tasks before it, then shuffled."""
    count = draw(st.integers(min_value=0, max_value=25))
    tasks = []
    for index in range(count):
        deps = draw(st.lists(st.integers(0, index - 1), unique=True)) if index else []
        tasks.append(spec(f"t{index}", *(f"t{dep}" for dep in deps)))
    return draw(st.permutations(tasks))


@given(random_dags())
def test_every_dependency_lands_in_an_earlier_wave(tasks: list[TaskSpec]) -> None:
    plan = waves(tasks)
    wave_of = {task_id: number for number, wave in enumerate(plan) for task_id in wave}
    assert sorted(wave_of) == sorted(task.id for task in tasks)
    assert sum(len(wave) for wave in plan) == len(tasks)
    for task in tasks:
        for dep in task.depends_on:
            assert wave_of[dep] < wave_of[task.id]
        if task.depends_on:
            assert wave_of[task.id] == 1 + max(wave_of[dep] for dep in task.depends_on)
    for wave in plan:
        assert wave == sorted(wave)


@given(random_dags())
def test_validate_dag_accepts_every_dag(tasks: list[TaskSpec]) -> None:
    validate_dag(tasks)


@given(random_dags(), st.data())
def test_a_back_edge_that_closes_a_cycle_is_rejected(tasks: list[TaskSpec], data: st.DataObject) -> None:
    # Given a path dependent -> ... -> ancestor through the DAG
    deps = {task.id: task.depends_on for task in tasks}
    with_deps = [task for task in tasks if task.depends_on]
    if not with_deps:
        return
    start = data.draw(st.sampled_from(with_deps)).id
    path = [start]
    while deps[path[-1]]:
        path.append(data.draw(st.sampled_from(deps[path[-1]])))
    ancestor = data.draw(st.sampled_from(path[1:]))
    # When the ancestor is made to depend on the start of the path
    closed = [
        task.model_copy(update={"depends_on": [*task.depends_on, start]}) if task.id == ancestor else task
        for task in tasks
    ]
    # Then the graph is refused, naming a real cycle: each task depends on the next
    with pytest.raises(
        InvalidInput, match=r"^tasks form a cycle: .*; remove one of these dependencies$"
    ) as caught:
        validate_dag(closed)
    cycle = str(caught.value).removeprefix("tasks form a cycle: ").split(";")[0].split(" -> ")
    closed_deps = {task.id: task.depends_on for task in closed}
    assert cycle[0] == cycle[-1]
    assert len(set(cycle)) == len(cycle) - 1
    assert all(after in closed_deps[before] for before, after in zip(cycle, cycle[1:], strict=False))


@given(random_dags(), st.data())
def test_ready_tasks_have_all_dependencies_done(tasks: list[TaskSpec], data: st.DataObject) -> None:
    ids = [task.id for task in tasks]
    done = set(data.draw(st.lists(st.sampled_from(ids), unique=True))) if ids else set()
    for task_id in ready(tasks, done, running=set()):
        task = next(task for task in tasks if task.id == task_id)
        assert task_id not in done
        assert set(task.depends_on) <= done
