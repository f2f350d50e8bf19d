"""The kill rate of the last `make mutation` run, and every mutant that was not killed.

    python scripts/mutation_summary.py                  # every mutant
    python scripts/mutation_summary.py 'vitladder.analysis.*' ...   # mutant-name globs

Reads mutmut's per-file results under mutants/. A timeout counts as killed (the mutant hung the
tests). A run stopped part way leaves mutants not checked: they are counted apart, out of the rates,
and the next `make mutation` goes on with them. Survivors judged equivalent (no input can tell them
from the original) are listed with the reason in docs/mutation.md; the kill rate over the mutants
that change behaviour leaves them out. A listed mutant that no longer survives is reported, so the
list cannot go stale unnoticed. Show a survivor's change with `mutmut show NAME`.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections import Counter
from pathlib import Path

DETECTED = {"killed", "timeout", "caught by type check", "segfault"}
UNFINISHED = {"not checked", "check was interrupted by user"}  # a stopped run's: the next one checks them
EQUIVALENT_LIST = Path(__file__).resolve().parents[1] / "docs" / "mutation.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|\s*$")  # | `mutant name` | why it is equivalent |


def results(root: Path, patterns: list[str]) -> dict[str, str]:
    """Mutant name -> mutmut's status, for the mutants matching ``patterns``."""
    from mutmut.stats import status_by_exit_code  # make mutation's extra; the rest of this script needs none

    statuses = {}
    for meta in sorted(root.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if not patterns or any(fnmatch.fnmatch(name, p) for p in patterns):
                statuses[name] = status_by_exit_code[code]
    return statuses


def judged_equivalent(text: str) -> dict[str, str]:
    """Mutant name -> why it is equivalent, from the table rows of docs/mutation.md."""
    return {match[1]: match[2] for line in text.splitlines() if (match := ROW.match(line))}


def report(statuses: dict[str, str], equivalent: dict[str, str]) -> list[str]:
    unfinished = sum(status in UNFINISHED for status in statuses.values())
    statuses = {name: status for name, status in statuses.items() if status not in UNFINISHED}
    if not statuses:
        return [f"none of the {unfinished} mutants checked yet: run make mutation"]
    counts = Counter(statuses.values())
    detected = sum(counts[s] for s in DETECTED)
    missed = {name: status for name, status in sorted(statuses.items()) if status not in DETECTED}
    lines = [f"{status:>12}  {name}" for name, status in missed.items() if name not in equivalent]
    lines += [f"  equivalent  {name}  ({equivalent[name]})" for name in missed if name in equivalent]
    lines += [
        f"       stale  {name}: listed as equivalent in docs/mutation.md but {statuses[name]}"
        for name in sorted(equivalent)
        if name in statuses and name not in missed
    ]
    lines.append(", ".join(f"{n} {s}" for s, n in counts.most_common()))
    if unfinished:
        lines.append(f"{unfinished} more not checked yet: make mutation goes on with them")
    lines.append(f"killed {detected} of {len(statuses)} mutants ({100 * detected / len(statuses):.1f}%)")
    changing = len(statuses) - sum(name in equivalent for name in missed)
    lines.append(
        f"killed {detected} of the {changing} that change behaviour ({100 * detected / changing:.1f}%; "
        f"{len(statuses) - changing} judged equivalent)"
    )
    return lines


def main(argv: list[str]) -> int:
    statuses = results(Path("mutants"), argv)
    if not statuses:
        print("error: no mutmut results under mutants/: run make mutation first", file=sys.stderr)
        return 2
    equivalent = judged_equivalent(EQUIVALENT_LIST.read_text()) if EQUIVALENT_LIST.is_file() else {}
    print("\n".join(report(statuses, equivalent)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
