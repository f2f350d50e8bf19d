"""scripts/mutation_summary.py: the kill rate `make mutation` reports, with the survivors judged equivalent
(docs/mutation.md) left out of the behaviour-changing count, a stale judgement reported, and the mutants a
stopped run did not reach counted apart."""

from __future__ import annotations

import json

import pytest
from entry_points import load_script


@pytest.fixture
def summary() -> dict:
    return vars(load_script("mutation_summary"))  # its functions; main runs only as a script


def write_meta(root, exit_codes: dict) -> None:
    meta = root / "mutants" / "src" / "pkg" / "mod.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": exit_codes}))


def test_the_equivalence_table_is_read_from_its_rows(summary) -> None:
    text = "# Mutation testing\n\n| mutant | why |\n|---|---|\n| `pkg.mod.x_f__mutmut_1` | dim +1 is -1 on 2-D |\n"
    assert summary["judged_equivalent"](text) == {"pkg.mod.x_f__mutmut_1": "dim +1 is -1 on 2-D"}


def test_kill_rates_over_all_mutants_and_over_those_that_change_behaviour(summary) -> None:
    codes = {f"pkg.mod.x_f__mutmut_{i}": 1 for i in range(1, 17)}  # 16 killed
    codes |= {"pkg.mod.x_f__mutmut_17": 36, "pkg.mod.x_f__mutmut_18": 0, "pkg.mod.x_f__mutmut_19": 0}
    statuses = {name: "killed" for name in codes} | {
        "pkg.mod.x_f__mutmut_17": "timeout",
        "pkg.mod.x_f__mutmut_18": "survived",
        "pkg.mod.x_f__mutmut_19": "survived",
    }
    equivalent = {"pkg.mod.x_f__mutmut_18": "same maths", "pkg.mod.x_f__mutmut_3": "thought so once"}
    lines = summary["report"](statuses, equivalent)
    assert "    survived  pkg.mod.x_f__mutmut_19" in lines
    assert "  equivalent  pkg.mod.x_f__mutmut_18  (same maths)" in lines
    assert any(line.strip().startswith("stale  pkg.mod.x_f__mutmut_3") for line in lines)
    assert lines[-2] == "killed 17 of 19 mutants (89.5%)"  # a timeout counts as killed
    assert lines[-1] == "killed 17 of the 18 that change behaviour (94.4%; 1 judged equivalent)"


def test_a_stopped_run_rates_what_it_checked_and_counts_the_rest_apart(summary) -> None:
    statuses = {"pkg.mod.x_f__mutmut_1": "killed", "pkg.mod.x_f__mutmut_2": "survived"}
    statuses |= {"pkg.mod.x_g__mutmut_1": "not checked", "pkg.mod.x_g__mutmut_2": "check was interrupted by user"}
    lines = summary["report"](statuses, {})
    assert lines == [
        "    survived  pkg.mod.x_f__mutmut_2",
        "1 killed, 1 survived",
        "2 more not checked yet: make mutation goes on with them",
        "killed 1 of 2 mutants (50.0%)",
        "killed 1 of the 2 that change behaviour (50.0%; 0 judged equivalent)",
    ]
    unchecked = {name: "not checked" for name in statuses}
    assert summary["report"](unchecked, {}) == ["none of the 4 mutants checked yet: run make mutation"]


def test_mutmuts_results_are_read_from_its_meta_files(summary, tmp_path) -> None:
    pytest.importorskip("mutmut")  # make mutation's extra, not installed by make test
    write_meta(tmp_path, {"pkg.mod.x_f__mutmut_1": 1, "pkg.mod.x_f__mutmut_2": 36, "pkg.mod.x_f__mutmut_3": 0})
    statuses = summary["results"](tmp_path / "mutants", [])
    assert statuses == {
        "pkg.mod.x_f__mutmut_1": "killed",
        "pkg.mod.x_f__mutmut_2": "timeout",
        "pkg.mod.x_f__mutmut_3": "survived",
    }
    assert summary["results"](tmp_path / "mutants", ["other.*"]) == {}
