"""The kill rate of the last `make mutation` run, and every mutant that was not killed.

    python scripts/mutation_summary.py 'vitladder.analysis.*' ...   # mutant-name globs (default: all)

Reads mutmut's per-file results under mutants/. A timeout counts as killed (the mutant hung the
tests). Show a survivor's change with `mutmut show NAME`.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

DETECTED = {"killed", "timeout", "caught by type check", "segfault"}


def results(root: Path, patterns: list[str]) -> dict[str, str]:
    """Mutant name -> mutmut's status, for the mutants matching ``patterns``."""
    statuses = {}
    for meta in sorted(root.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if not patterns or any(fnmatch.fnmatch(name, p) for p in patterns):
                statuses[name] = status_by_exit_code[code]
    return statuses


def main(argv: list[str]) -> int:
    statuses = results(Path("mutants"), argv)
    if not statuses:
        print("error: no mutmut results under mutants/: run make mutation first", file=sys.stderr)
        return 2
    counts = Counter(statuses.values())
    detected = sum(counts[s] for s in DETECTED)
    for name, status in sorted(statuses.items()):
        if status not in DETECTED:
            print(f"{status:>12}  {name}")
    print(", ".join(f"{n} {s}" for s, n in counts.most_common()))
    print(f"killed {detected} of {len(statuses)} mutants ({100 * detected / len(statuses):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
