"""SCUD Graph v1 files: read liberally, written exactly, turned into the tasks still to run."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.dag import TaskKind, validate_dag, waves
from shared.errors import InvalidInput
from shared.scud import (
    ScudGraph,
    ScudPhase,
    ScudTask,
    dump_scg,
    parse_scg,
    set_status,
    to_task_specs,
    write_back,
)

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent.parent / "fixtures" / "scud"
MULTI_PHASE = (FIXTURES / "multi_phase.scg").read_text(encoding="utf-8")
HAND_WRITTEN = (FIXTURES / "hand_written.scg").read_text(encoding="utf-8")
SCUD_LATEST = (FIXTURES / "scud_latest.scg").read_text(encoding="utf-8")


def task_of(graph: ScudGraph, key: str) -> ScudTask:
    return next(task for task in graph.tasks if task.key == key)


def specs_by_id(text: str) -> dict[str, list[str]]:
    return {spec.id: spec.depends_on for spec in to_task_specs(parse_scg(text))}


# --- reading ----------------------------------------------------------------------------------


def test_multi_phase_file_is_read_phase_by_phase_in_file_order() -> None:
    graph = parse_scg(MULTI_PHASE)
    assert [phase.name for phase in graph.phases] == ["auth", "api"]
    assert graph.meta == {"name": "auth", "id_format": "sequential", "updated": "2025-11-02T09:14:00Z"}
    assert [task.key for task in graph.phases[1].tasks] == ["api:1", "api:2", "api:3"]
    assert [task.id for task in graph.tasks][:4] == ["1", "2", "3", "3.1"]


def test_escaped_pipes_and_backslashes_in_titles_are_unescaped() -> None:
    graph = parse_scg(MULTI_PHASE)
    assert task_of(graph, "auth:3").title == "Login endpoint | JSON and form posts"
    assert task_of(graph, "auth:5").title == "Rate-limit login attempts (C:\\tmp\\locks)"
    assert task_of(graph, "api:3").title == "Ship 🚀 docs für alle"


def test_node_cells_give_status_complexity_and_priority() -> None:
    graph = parse_scg(MULTI_PHASE)
    login = task_of(graph, "auth:3")
    assert (login.status, login.complexity, login.priority) == ("X", 8, "critical")
    docs = task_of(graph, "api:3")
    assert (docs.status, docs.complexity, docs.priority) == ("R", None, None)


def test_details_blocks_keep_blank_lines_indentation_and_hash_lines() -> None:
    graph = parse_scg(MULTI_PHASE)
    assert task_of(graph, "auth:3").details == {
        "description": (
            "Accept credentials as JSON or form posts.\n\nReturn 401 with a generic message on failure."
        ),
        "test_strategy": "Table-driven tests over good and bad credentials.",
    }
    rate_limit = task_of(graph, "auth:5").details
    assert rate_limit["description"].endswith("\n# an indented line under details is text, not a comment")
    assert rate_limit["details"] == "  window = 15m\n  max_attempts = 5"


def test_parents_link_both_ways_and_assignments_are_kept() -> None:
    graph = parse_scg(MULTI_PHASE)
    assert task_of(graph, "auth:3").children == ["3.1", "3.2"]
    assert task_of(graph, "auth:3.2").parent == "3"
    assert task_of(graph, "auth:3.2").assigned_to == "alice"


def test_edges_read_dependent_then_dependency_across_phases() -> None:
    graph = parse_scg(MULTI_PHASE)
    assert task_of(graph, "auth:3.2").depends_on == ["3.1"]
    assert task_of(graph, "api:2").depends_on == ["1", "auth:3"]


def test_loose_hand_written_style_is_accepted() -> None:
    # key: value meta without braces, status and priority words, ids already phase-qualified
    graph = parse_scg(HAND_WRITTEN)
    assert graph.meta == {"name": "billing", "owner": "finance-team"}
    first, second, third = graph.tasks
    assert (first.key, first.status, first.priority) == ("billing:1", "D", "high")
    assert (second.status, second.complexity) == ("P", None)
    assert third.depends_on == ["billing:2"]


def test_sections_of_newer_scud_versions_are_read() -> None:
    graph = parse_scg(SCUD_LATEST)
    phase = graph.phases[0]
    assert task_of(graph, "payments:2").status == "!"
    assert task_of(graph, "payments:3").annotations == "role=builder scope=src/payments/**"
    assert task_of(graph, "payments:4").agent_type == "reviewer"
    assert phase.behavior_edges == ["2 ~~ 3 | reason=both touch migrations/", "4 >> 3"]
    assert phase.sections["roles"] == ["r:builder | Builder | src/** tests/** | -"]
    assert list(phase.sections) == ["roles", "weave"]


def test_windows_line_endings_and_a_byte_order_mark_are_read() -> None:
    text = "\ufeff" + MULTI_PHASE.replace("\n", "\r\n")
    assert parse_scg(text) == parse_scg(MULTI_PHASE)


def test_blank_line_inside_details_survives_an_editor_trimming_its_indent() -> None:
    text = "@nodes\n1 | One | P\n@details\n1 | description |\n  first\n\n\n  second\n\n@edges\n"
    assert parse_scg(text).tasks[0].details["description"] == "first\n\n\nsecond"


def test_empty_file_has_no_phases() -> None:
    graph = parse_scg("# nothing yet\n\n")
    assert graph.tasks == []
    assert graph.meta == {}
    assert parse_scg("").phases == []


# --- malformed input --------------------------------------------------------------------------

MALFORMED = [
    ("@nodes\n1 | One | P\n@pipeline\n", 3, r"unknown section '@pipeline'"),
    ("@nodes\n1 | One | Q | 1 | H\n", 2, r"unknown status 'Q' for task '1'"),
    ("@nodes\n1\n", 2, r"a task row is 'id \| title \| status \| complexity \| priority'"),
    ("@nodes\n1 | a | P | 1 | H | role=x | extra\n", 2, r"a task row is"),
    ("@nodes\n1 | One | P | lots | H\n", 2, r"complexity 'lots' of task '1' is not a whole number"),
    ("@nodes\n1 | One | P | 1 | urgent\n", 2, r"unknown priority 'urgent' for task '1'"),
    ("@nodes\nnot an id! | One | P\n", 2, r"task id 'not an id!' may use only"),
    ("@nodes\n1 | One\n1 | Again\n", 3, r"task '1' is defined twice"),
    ("@nodes\n1 | One\n@edges\n1 -> 2\n", 4, r"task '1' depends on unknown task '2'"),
    ("@nodes\n1 | One\n@edges\n9 -> 1\n", 4, r"no task '9'"),
    ("@nodes\n1 | One\n@edges\n1 depends on 2\n", 4, r"an edge row is 'dependent -> dependency'"),
    ("@nodes\n1 | One\n@details\n7 | description |\n  text\n", 4, r"no task '7'"),
    ("@nodes\n1 | One\n@details\n1 | description |\n1 | description |\n", 5, r"'description' details twice"),
    ("@nodes\n1 | One\n2 | Two\n@parents\n1: 2\n2: 1\n", 6, r"task '1' would be its own ancestor"),
    ("@nodes\n1 | One\n2 | Two\n3 | Three\n@parents\n1: 3\n2: 3\n", 7, r"task '3' already has parent '1'"),
    ("@nodes\n1 | One\n@parents\n1 2 3\n", 4, r"a parents row is 'parent: child, child'"),
    ("1 | One | P\n", 1, r"'1 \| One \| P' is outside any section"),
    ("# SCUD Graph v2\n@nodes\n", 1, r"SCUD Graph v2; only v1 can be read"),
    ("@meta\nname: my phase\n", 2, r"phase name 'my phase' may use only"),
    ("@nodes\n1 | One\n---\n@nodes\n2 | Two\n@edges\n2 -> zz:1\n", 7, r"unknown task 'zz:1'"),
    ("@meta\nname: a\n@nodes\n1 | One\n---\n@meta\nname: a\n@nodes\n", 7, r"phase 'a' appears twice"),
    ("@nodes\n1 | One\n---\n@nodes\n1 | Again\n", 5, r"task '1' is defined twice \(first on line 2\)"),
]


@pytest.mark.parametrize(("text", "line", "problem"), MALFORMED)
def test_malformed_lines_are_reported_as_file_and_line(text: str, line: int, problem: str) -> None:
    with pytest.raises(InvalidInput, match=rf"^tasks\.scg:{line}: .*{problem}") as caught:
        parse_scg(text)
    assert "\n" not in str(caught.value)


def test_messages_name_the_source_given() -> None:
    with pytest.raises(InvalidInput, match=r"^\.scud/tasks/tasks\.scg:2: "):
        parse_scg("@nodes\n1 | One | Q\n", source=".scud/tasks/tasks.scg")


# --- writing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [MULTI_PHASE, SCUD_LATEST], ids=["multi_phase", "scud_latest"])
def test_a_file_in_the_scud_cli_layout_is_written_back_byte_for_byte(text: str) -> None:
    assert dump_scg(parse_scg(text)) == text


def test_round_trip_of_the_fixtures() -> None:
    for text in (MULTI_PHASE, HAND_WRITTEN, SCUD_LATEST):
        graph = parse_scg(text)
        assert parse_scg(dump_scg(graph)) == graph


def test_loose_style_is_written_in_the_scud_cli_layout() -> None:
    written = dump_scg(parse_scg(HAND_WRITTEN))
    assert written.startswith("# SCUD Graph v1\n# Phase: billing\n\n@meta {\n  name billing\n")
    assert "billing:1 | Invoice model | D | 2 | H\n" in written


# --- what runs --------------------------------------------------------------------------------


def test_done_cancelled_and_deferred_tasks_are_not_run() -> None:
    ids = set(specs_by_id(MULTI_PHASE))
    assert not ids & {"auth:1", "auth:2", "auth:4", "auth:6"}
    assert {"auth:3", "auth:3.1", "auth:3.2", "auth:5", "api:1", "api:2", "api:3"} == ids


def test_expanded_parent_is_a_group_done_after_its_children_and_depending_on_it_waits_for_them() -> None:
    specs = {spec.id: spec for spec in to_task_specs(parse_scg(MULTI_PHASE))}
    assert specs["auth:3"].kind == TaskKind.GROUP  # no agent works it; it is done when they are
    assert specs["auth:3"].depends_on == ["auth:3.1", "auth:3.2"]
    assert {spec.kind for key, spec in specs.items() if key != "auth:3"} == {TaskKind.WORK}
    assert specs["auth:5"].depends_on == ["auth:3"]
    assert specs["api:2"].depends_on == ["api:1", "auth:3"]


def test_depending_on_a_parent_this_run_cannot_finish_waits_for_its_runnable_children() -> None:
    text = (
        "@nodes\n1 | Group | X\n1.1 | Part | P\n1.2 | Later | F\n2 | Next\n"
        "@edges\n2 -> 1\n@parents\n1: 1.1, 1.2\n"
    )
    assert specs_by_id(text) == {"1.1": [], "2": ["1.1"]}


def test_a_parent_with_no_children_left_to_run_is_not_a_task() -> None:
    text = (
        "@nodes\n1 | Group | X\n1.1 | Part | D\n1.2 | Dropped | C\n2 | Next\n"
        "@edges\n2 -> 1\n@parents\n1: 1.1, 1.2\n"
    )
    assert specs_by_id(text) == {"2": []}


def test_a_parent_a_deferred_child_keeps_open_is_no_group() -> None:
    # Given a parent whose one child runs and whose other is deferred
    text = "@nodes\n1 | Group | X\n1.1 | Part | P\n1.2 | Later | F\n@parents\n1: 1.1, 1.2\n"
    # Then only the child runs: this run cannot finish the parent, so it is not shown as done
    assert specs_by_id(text) == {"1.1": []}


def test_nested_parents_are_groups_done_after_their_runnable_descendants() -> None:
    text = (
        "@nodes\n1 | Epic | X\n1.1 | Story | X\n1.1.1 | Part | P\n1.1.2 | Other | D\n1.2 | Last | P\n"
        "@parents\n1: 1.1, 1.2\n1.1: 1.1.1, 1.1.2\n"
    )
    assert specs_by_id(text) == {"1": ["1.1", "1.2"], "1.1": ["1.1.1"], "1.1.1": [], "1.2": []}


def test_dependencies_on_done_cancelled_and_deferred_tasks_are_dropped() -> None:
    text = (
        "@nodes\n1 | Done | D\n2 | Cancelled | C\n3 | Deferred | F\n4 | Work | P\n"
        "@edges\n4 -> 1\n4 -> 2\n4 -> 3\n"
    )
    assert specs_by_id(text) == {"4": []}


def test_children_inherit_their_parents_dependencies() -> None:
    text = "@nodes\n1 | First\n2 | Group | X\n2.1 | Part\n@edges\n2 -> 1\n@parents\n2: 2.1\n"
    assert specs_by_id(text) == {"1": [], "2": ["2.1"], "2.1": ["1"]}


def test_children_of_a_closed_parent_are_not_run() -> None:
    text = "@nodes\n1 | Group | C\n1.1 | Part | P\n2 | Next\n@edges\n2 -> 1\n@parents\n1: 1.1\n"
    assert specs_by_id(text) == {"2": []}


def test_failed_tasks_run_again_and_agent_types_become_categories() -> None:
    specs = {spec.id: spec for spec in to_task_specs(parse_scg(SCUD_LATEST))}
    assert list(specs) == ["payments:2", "payments:3", "payments:4"]
    assert [spec.category for spec in specs.values()] == ["builder", "builder", "reviewer"]


def test_agent_types_the_project_does_not_define_fall_back_to_builder() -> None:
    specs = to_task_specs(parse_scg(SCUD_LATEST), categories={"builder", "validator", "planner"})
    assert {spec.category for spec in specs} == {"builder"}


def test_description_gathers_every_detail_field_under_a_heading() -> None:
    spec = next(spec for spec in to_task_specs(parse_scg(MULTI_PHASE)) if spec.id == "auth:5")
    assert spec.description.startswith("Use a sliding window per account | per IP.\n")
    assert spec.description.endswith("\n\n## Details\n  window = 15m\n  max_attempts = 5")
    assert spec.title == "Rate-limit login attempts (C:\\tmp\\locks)"


def test_subtask_description_says_what_it_is_part_of() -> None:
    spec = next(spec for spec in to_task_specs(parse_scg(MULTI_PHASE)) if spec.id == "auth:3.2")
    assert "## Part of\nLogin endpoint | JSON and form posts" in spec.description


def test_runnable_tasks_of_the_fixture_form_a_dag_with_waves() -> None:
    assert waves(to_task_specs(parse_scg(MULTI_PHASE))) == [
        ["api:1", "auth:3.1"],
        ["auth:3.2"],
        ["auth:3"],
        ["api:2", "auth:5"],
        ["api:3"],
    ]


def test_a_cycle_in_a_scud_file_is_named_by_validate_dag() -> None:
    text = "@meta\nname: auth\n@nodes\n1 | A\n2 | B\n3 | C\n@edges\n1 -> 2\n2 -> 3\n3 -> 1\n"
    with pytest.raises(InvalidInput) as caught:
        validate_dag(to_task_specs(parse_scg(text)))
    assert str(caught.value) == (
        "tasks form a cycle: auth:1 -> auth:2 -> auth:3 -> auth:1; remove one of these dependencies"
    )


@pytest.mark.parametrize("bad_id", ["a b", "", "a|b", "x/y"])
def test_a_built_task_needs_an_id_scud_can_write(bad_id: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        ScudTask(id=bad_id, title="t")


def test_a_built_task_takes_status_and_priority_names_and_stores_codes() -> None:
    task = ScudTask(id="1", title="t", status="in_progress", priority="H")
    assert (task.status, task.priority) == ("I", "high")
    with pytest.raises(pydantic.ValidationError, match="unknown status 'finished'"):
        ScudTask(id="1", title="t", status="finished")


def test_an_unknown_reference_in_a_built_graph_is_named_by_validate_dag() -> None:
    graph = ScudGraph(phases=[ScudPhase(tasks=[ScudTask(id="1", title="One", depends_on=["zz"])])])
    with pytest.raises(InvalidInput, match=r"^task '1' depends on unknown task 'zz'$"):
        validate_dag(to_task_specs(graph))


# --- statuses ---------------------------------------------------------------------------------


def test_set_status_returns_a_changed_copy() -> None:
    graph = parse_scg(MULTI_PHASE)
    changed = set_status(graph, "auth:3.1", "done")
    assert task_of(changed, "auth:3.1").status == "D"
    assert task_of(graph, "auth:3.1").status == "P"
    assert "auth:3.1" not in {spec.id for spec in to_task_specs(changed)}


def test_set_status_accepts_a_bare_id_only_when_one_phase_has_it() -> None:
    graph = parse_scg(MULTI_PHASE)
    assert task_of(set_status(graph, "3.2", "D"), "auth:3.2").status == "D"
    with pytest.raises(InvalidInput, match=r"task id '1' is in several phases \(auth:1, api:1\)"):
        set_status(graph, "1", "D")


@pytest.mark.parametrize(
    ("task_id", "status", "problem"),
    [("nope", "D", "no task 'nope'"), ("api:1", "finished", "unknown SCUD status 'finished'")],
)
def test_set_status_refuses_unknown_tasks_and_statuses(task_id: str, status: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        set_status(parse_scg(MULTI_PHASE), task_id, status)


def test_write_back_changes_only_the_status_cells(tmp_path: Path) -> None:
    path = tmp_path / "tasks.scg"
    path.write_text(MULTI_PHASE, encoding="utf-8")
    write_back(path, {"auth:3.1": "D", "api:2": "in-progress"})
    before, after = MULTI_PHASE.split("\n"), path.read_text(encoding="utf-8").split("\n")
    changed = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
    assert changed == [
        ("3.1 | Parse credentials | P | 2 | H", "3.1 | Parse credentials | D | 2 | H"),
        ("2 | Protected routes | B | 5 | H", "2 | Protected routes | I | 5 | H"),
    ]


def test_write_back_of_the_last_subtask_marks_its_parent_done(tmp_path: Path) -> None:
    # Given the fixture's parent auth:3 (expanded) with two open subtasks
    path = tmp_path / "tasks.scg"
    path.write_text(MULTI_PHASE, encoding="utf-8")
    # When the first is done, the parent stays open; when the second is, the parent is done too
    write_back(path, {"auth:3.1": "D"})
    assert task_of(parse_scg(path.read_text(encoding="utf-8")), "auth:3").status == "X"
    write_back(path, {"auth:3.2": "D"})
    after = path.read_text(encoding="utf-8")
    assert "3 | Login endpoint \\| JSON and form posts | D | 8 | C" in after
    assert {task.key: task.status for task in parse_scg(after).tasks} == {
        task.key: "D" if task.key in {"auth:3", "auth:3.1", "auth:3.2"} else task.status
        for task in parse_scg(MULTI_PHASE).tasks
    }


def test_write_back_closes_every_ancestor_whose_children_are_done(tmp_path: Path) -> None:
    path = tmp_path / "tasks.scg"
    text = (
        "@nodes\n1 | Epic | X\n1.1 | Story | P\n1.1.1 | Part | P\n1.1.2 | Dropped | C\n1.2 | Last | D\n"
        "@parents\n1: 1.1, 1.2\n1.1: 1.1.1, 1.1.2\n"
    )
    path.write_text(text, encoding="utf-8")
    write_back(path, {"1.1.1": "D"})
    statuses = {task.key: task.status for task in parse_scg(path.read_text(encoding="utf-8")).tasks}
    assert statuses == {"1": "D", "1.1": "D", "1.1.1": "D", "1.1.2": "C", "1.2": "D"}


@pytest.mark.parametrize(
    ("others", "parent"),
    [("D", "D"), ("C", "D"), ("F", "X"), ("P", "X")],
    ids=["done", "cancelled", "deferred", "pending"],
)
def test_a_parent_is_done_when_its_children_not_cancelled_are(
    tmp_path: Path, others: str, parent: str
) -> None:
    path = tmp_path / "tasks.scg"
    path.write_text(f"@nodes\n1 | Group | X\n1.1 | Part | P\n1.2 | Other | {others}\n@parents\n1: 1.1, 1.2\n")
    write_back(path, {"1.1": "D"})
    assert task_of(parse_scg(path.read_text(encoding="utf-8")), "1").status == parent


def test_write_back_keeps_comments_spacing_line_endings_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "tasks.scg"
    original = HAND_WRITTEN.replace("\n", "\r\n").replace("| P\r\n", "|  P  \r\n")
    path.write_bytes(original.encode("utf-8"))
    path.chmod(0o640)
    write_back(path, {"billing:3": "done", "billing:2": "R"})
    expected = original.replace("| pending |", "| R |").replace("|  P  \r\n", "|  D  \r\n")
    assert path.read_bytes().decode("utf-8") == expected
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [entry.name for entry in tmp_path.iterdir()] == ["tasks.scg"]


def test_write_back_adds_a_status_cell_to_a_row_without_one(tmp_path: Path) -> None:
    path = tmp_path / "tasks.scg"
    path.write_text("@nodes\n1 | Only a title\n", encoding="utf-8")
    write_back(path, {"1": "D"})
    assert path.read_text(encoding="utf-8") == "@nodes\n1 | Only a title | D\n"


def test_write_back_of_unchanged_statuses_does_not_touch_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.scg"
    path.write_text(MULTI_PHASE, encoding="utf-8")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    write_back(path, {"auth:1": "done", "api:1": "P"})
    assert path.stat().st_mtime_ns == 1_000_000_000


def test_write_back_follows_a_symlink_and_keeps_it(tmp_path: Path) -> None:
    target = tmp_path / "real.scg"
    target.write_text(MULTI_PHASE, encoding="utf-8")
    link = tmp_path / "tasks.scg"
    link.symlink_to(target)
    write_back(link, {"api:3": "D"})
    assert link.is_symlink()
    assert "3 | Ship 🚀 docs für alle | D |  |" in target.read_text(encoding="utf-8")


def test_write_back_with_a_bad_status_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "tasks.scg"
    path.write_text(MULTI_PHASE, encoding="utf-8")
    with pytest.raises(InvalidInput, match="unknown SCUD status"):
        write_back(path, {"auth:3.1": "D", "auth:5": "finished"})
    assert path.read_text(encoding="utf-8") == MULTI_PHASE
    assert [entry.name for entry in tmp_path.iterdir()] == ["tasks.scg"]


# --- properties -------------------------------------------------------------------------------

ID_CHARS = "AZaz09_.-"
plain_ids = st.text(ID_CHARS, min_size=1, max_size=4)
phase_names = st.text(ID_CHARS, min_size=1, max_size=4)
words = st.text("abcxyz_", min_size=1, max_size=8)
titles = st.text(max_size=30).map(str.strip)
detail_values = st.text(st.characters(exclude_characters="\r", exclude_categories=["Cs"]), max_size=60)
meta_values = st.text(st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=20)
annotations = st.lists(st.tuples(words, st.text("az09/*._-", min_size=1, max_size=6)), max_size=3).map(
    lambda pairs: " ".join(f"{key}={value}" for key, value in pairs)
)
behavior_edges = st.builds("{} {} {}".format, plain_ids, st.sampled_from(["~~", ">>", "!="]), plain_ids)
opaque_rows = st.lists(
    st.lists(st.text("az09:*/ ", max_size=8).map(str.strip), min_size=1, max_size=4)
    .map(lambda cells: " | ".join(cells).strip())
    .filter(bool),
    min_size=1,
    max_size=3,
)


@st.composite
def scud_tasks(draw: st.DrawFn, phase: str | None) -> list[ScudTask]:
    ids = draw(st.lists(plain_ids, max_size=8, unique=True))
    tasks = []
    for index, task_id in enumerate(ids):
        parent = draw(st.none() | st.sampled_from(ids[:index])) if index else None
        tasks.append(
            ScudTask(
                id=task_id,
                title=draw(titles),
                status=draw(st.sampled_from("PIDRBFCX")),
                complexity=draw(st.none() | st.integers(-3, 100)),
                priority=draw(st.sampled_from([None, "critical", "high", "medium", "low"])),
                depends_on=draw(st.lists(st.sampled_from(ids), unique=True)) if ids else [],
                parent=parent,
                details=draw(st.dictionaries(words, detail_values, max_size=3)),
                phase=phase,
                assigned_to=draw(st.none() | titles.filter(bool)),
                agent_type=draw(st.none() | words),
                annotations=draw(annotations),
            )
        )
    for task in tasks:
        task.children = [child.id for child in tasks if child.parent == task.id]
    return tasks


@st.composite
def scud_graphs(draw: st.DrawFn) -> ScudGraph:
    names: list[str | None] = list(draw(st.lists(phase_names, min_size=1, max_size=3, unique=True)))
    if len(names) == 1 and draw(st.booleans()):
        names = [None]
    phases = []
    for name in names:
        meta = draw(
            st.dictionaries(
                words.filter(lambda key: key != "name"),
                meta_values.map(str.strip).filter(lambda value: not value.startswith(":")),
                max_size=3,
            )
        )
        if name is not None and draw(st.booleans()):
            meta["name"] = name
        phases.append(
            ScudPhase(
                name=name,
                meta=meta,
                tasks=draw(scud_tasks(name)),
                behavior_edges=draw(st.lists(behavior_edges, max_size=2)),
                sections=draw(
                    st.dictionaries(st.sampled_from(["roles", "weave", "partitions", "locks"]), opaque_rows)
                ),
            )
        )
    # a few dependencies across phases, written phase:id as scud writes them
    keys = [task.key for phase in phases for task in phase.tasks]
    for phase in phases:
        for task in phase.tasks:
            others = [key for key in keys if not key.startswith(f"{phase.name}:")]
            if others and phase.name is not None:
                task.depends_on += draw(st.lists(st.sampled_from(others), unique=True, max_size=2))
    return ScudGraph(phases=phases)


scud_lines = st.sampled_from(
    ["@nodes", "@edges", "@parents", "@details", "@meta {", "}", "---", "# Phase: p", "  value"]
    + ["1 | One | P | 2 | H", "2 | Two \\| too", "1 -> 2", "2 -> p:1", "1: 2", "2 | description |"]
)


@given(st.lists(scud_lines | st.text(max_size=12), max_size=20))
def test_any_text_is_read_into_a_graph_that_round_trips_or_refused_in_one_line(lines: list[str]) -> None:
    refusal = ""
    try:
        graph = parse_scg("\n".join(lines))
    except InvalidInput as refused:
        refusal = str(refused)
    if refusal:
        assert re.fullmatch(r"tasks\.scg:\d+: [^\n]+", refusal)
    else:
        assert parse_scg(dump_scg(graph)) == graph


@given(scud_graphs())
def test_parse_of_dump_is_the_same_graph(graph: ScudGraph) -> None:
    assert parse_scg(dump_scg(graph)) == graph


@given(scud_graphs())
def test_every_graph_scud_can_hold_converts_to_specs_whose_references_resolve(graph: ScudGraph) -> None:
    specs = to_task_specs(graph)
    ids = {spec.id for spec in specs}
    assert all(set(spec.depends_on) <= ids for spec in specs)
    assert all(spec.id != dep for spec in specs for dep in spec.depends_on)
