"""The ladder report: every finished rung's accuracy and attention beside the reference figures, from its run
folders (done.json, the probes' tables under ``analysis/``, metrics.csv's tracked values) into report.md, ladder.csv
and the figures the probes declare; with several seeds per rung, means with a 95% Student-t interval."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from vitladder.analysis.figures import plot_epoch_lines, plot_explainer, plot_layer_lines, save_figure
from vitladder.analysis.metrics import declared
from vitladder.analysis.outputs import history_rows, read_analysis_csv, read_csv, write_csv
from vitladder.analysis.probes import ByLayer, Column, by_layer, columns, probe_names
from vitladder.atomic import write_text
from vitladder.config import CONF_DIR, get_rung, rung_index, rung_names
from vitladder.errors import UserError
from vitladder.report.setting import ARTICLE, SETTING_COLUMNS, setting_row
from vitladder.run_folder import RunPaths, is_finished, parse_run_name, read_summary, rounded

TRACKING_PNG = "tracking_by_epoch.png"
TWO_DISTANCES = (
    "Layer 1 is the second of layers 0–6; reference uniform distance in brackets. The article's wording fits two "
    "readings of the mean attention distance, so both are here. *Mean attention distance* is this project's: each "
    "patch query's attention renormalised over the patch keys, so that attention parked on the CLS token does not "
    "count as local (uniform: 16.5 px for 8×8 patches of 4 px, the value the article quotes; 16.1 px for 4×4 of "
    "8 px). *CLS dropped* is the convention common in published code: the CLS key's weight left out without "
    "renormalising, which reads lower by each query's CLS share (uniform: 16.29 px and 15.1 px)."
)
TRAINED = ["rung", "epochs", "optimizer steps", "data", "training images", "test images (accuracy)", "attention over"]


def probes_of(results: list[RungResult]) -> list[str]:
    """The probes the runs ran (analysis.probes, in order of first appearance); the default list when none names any."""
    named = [n for r in results for run in r.runs for n in run.config.get("analysis", {}).get("probes", ())]
    known = [name for name in dict.fromkeys(named) if name in probe_names()]
    return known or list(OmegaConf.load(CONF_DIR / "config.yaml").analysis.probes)


def probe_columns(results: list[RungResult]) -> tuple[Column, ...]:
    return columns(probes_of(results))


def probe_layers(results: list[RungResult]) -> tuple[ByLayer, ...]:
    return by_layer(probes_of(results))


def ladder_columns(results: list[RungResult]) -> tuple[str, ...]:
    """ladder.csv's numbers (done.json's names), after its rung; the CSV then adds setting.SETTING_COLUMNS."""
    return ("test_acc", *(column.key for column in probe_columns(results)))


def figures(results: list[RungResult]) -> tuple[str, ...]:
    """The report's PNGs: each per-layer value drawn, the tracked columns against epoch (if any), the explainer."""
    drawn = [f"{value.short}_by_layer.png" for value in probe_layers(results) if value.figure]
    tracked = [TRACKING_PNG] if any(column.track for column in probe_columns(results)) else []
    return (*drawn, *tracked, "explainer.png")


@functools.cache
def t_quantile_975(df: int) -> float:
    """t_{0.975, df}. torch's Student t has a density but no quantile (nor has any other dependency), so the
    density is integrated from the median, 0, and the point where it holds 0.475 interpolated (within 1e-6)."""
    t = torch.linspace(0, 16, 16_001, dtype=torch.float64)  # t_{0.975, 1} = 12.7
    density = torch.distributions.StudentT(torch.tensor(float(df), dtype=torch.float64)).log_prob(t).exp()
    mass = torch.cumulative_trapezoid(density, t)  # P(0 < T < t[i + 1])
    return float(np.interp(0.475, mass.numpy(), t[1:].numpy()))


def mean_ci(values: list[float]) -> tuple[float, float | None]:
    """(mean, 95% t-interval half-width ``t * s / sqrt(n)``; None for fewer than 2 values)."""
    n, mean = len(values), sum(values) / len(values)
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_quantile_975(n - 1) * sd / math.sqrt(n)


def _readable(path: Path, read):
    """``read(path)`` ([] when there is no file); an unreadable file is one line saying how to mend it."""
    try:
        return read(path) if path.is_file() else []
    except (ValueError, TypeError) as error:
        raise UserError(f"{path}: unreadable ({error}); delete it and rerun the rung or scripts/analyze.py") from None


@dataclass
class RunRecord:
    """One finished run folder."""

    rung: str
    seed: int
    path: Path
    done: dict
    config: dict

    def table(self, name: str) -> list[dict]:
        """The rows of analysis/<name>.csv as floats ([] when not written)."""
        path = RunPaths(self.path).analysis / f"{name}.csv"
        return _readable(path, lambda path: [{k: float(v) for k, v in row.items()} for row in read_analysis_csv(path)])

    def history(self) -> list[dict]:
        """The values tracked during training, metrics.csv's ``track/<name>``: ``{"epoch": e, name: value}`` rows."""
        return _readable(RunPaths(self.path).metrics_csv, lambda path: history_rows(read_csv(path), prefix="track/"))


@dataclass
class RungResult:
    """A rung's numbers over its finished seeds."""

    rung: str
    runs: list[RunRecord]

    @property
    def seeds(self) -> str:
        return ",".join(str(run.seed) for run in self.runs)

    def values(self, key: str) -> list[float]:
        """One value per seed of a ladder.csv column (done.json's), from the seeds that have it."""
        return [float(run.done[key]) for run in self.runs if run.done.get(key) is not None]

    def stats(self, key: str) -> tuple[float | None, float | None]:
        """(mean, 95% CI half-width) over the seeds of a ladder.csv column; None where there is none."""
        values = self.values(key)
        return mean_ci(values) if values else (None, None)

    def setting(self, number: str = "{:,}") -> dict[str, str]:
        """What its runs trained, on which images, and where that differs from the article (setting.SETTING_COLUMNS)."""
        # A done.json from before it recorded the model: the run's config.yaml says it.
        done = [{"model": run.config.get("model"), **run.done} for run in self.runs]
        return setting_row(done, get_rung(self.rung).reference.get("epochs"), number)

    def row(self, keys: Sequence[str]) -> dict:
        """Its numbers, unrounded: each of ``keys``' mean over seeds and ``<key>_ci95``, and what it trained."""
        row = {"rung": self.rung, "rung_index": rung_index(self.rung), "seeds": self.seeds, "n_seeds": len(self.runs)}
        for key in keys:
            row[key], row[f"{key}_ci95"] = self.stats(key)
        return row | self.setting(number="{}")

    def by_layer(self, key: str, table: str = "layers") -> list[float]:
        """The per-layer mean over seeds of a ``<table>.csv`` column ([] if not analysed or older than the column)."""
        per_seed = [[row[key] for row in rows] for run in self.runs if (rows := run.table(table)) and key in rows[0]]
        return [sum(layer) / len(layer) for layer in zip(*per_seed)]

    def tracked(self, name: str) -> dict[int, float]:
        """``{epoch: the mean over the seeds that tracked it}`` of a value tracked during training ({} when none)."""
        per_epoch: dict[int, list[float]] = {}
        for row in (row for run in self.runs for row in run.history() if name in row):
            per_epoch.setdefault(int(row["epoch"]), []).append(row[name])
        return {epoch: sum(values) / len(values) for epoch, values in sorted(per_epoch.items())}


def _read_run(path: Path) -> RunRecord | None:
    parsed, paths = parse_run_name(path.name), RunPaths(path)
    if parsed is None or parsed[0] not in rung_names() or not is_finished(path):  # the report folder, a set-aside run
        return None
    done = _readable(paths.done, lambda _: read_summary(path))
    config = OmegaConf.to_container(OmegaConf.load(paths.config)) if paths.config.is_file() else {}
    return RunRecord(parsed[0], int(done.get("seed", parsed[1])), path, done, config)


def collect(ladder_dir: str | Path) -> list[RungResult]:
    """The finished rungs of a ladder folder, in ladder order, each with its seeds sorted."""
    runs = [r for p in sorted(Path(ladder_dir).iterdir()) if p.is_dir() and (r := _read_run(p)) is not None]
    by_rung = {rung: sorted((r for r in runs if r.rung == rung), key=lambda r: r.seed) for rung in rung_names()}
    return [RungResult(rung, seeds) for rung, seeds in by_rung.items() if seeds]


def _fmt(result: RungResult, key: str, scale: float = 1.0, digits: int = 1, unit: str = "", ci: bool = True) -> str:
    """``mean`` or ``mean ± half-width`` of the rung's per-seed values of ``key``, as text for the table."""
    values = [v * scale for v in result.values(key)]
    if not values:
        return "—"
    mean, half = mean_ci(values)
    return f"{mean:.{digits}f}{unit}" + ("" if half is None or not ci else f" ± {half:.{digits}f}")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(cells) + " |" for cells in [header, *rows]]
    return [lines[0], "|" + "---|" * len(header), *lines[1:]]


def _setup_line(results: list[RungResult]) -> str:
    """Which data and profile the runs used (and a warning when not comparable with the reference)."""
    seen = set()
    for cfg in (run.config for result in results for run in result.runs):
        data, profile = cfg.get("data", {}), cfg.get("profile", {}).get("name", "?")
        source = data.get("source", "?") + (f" ({data['root']})" if data.get("source") == "imagefolder" else "")
        subsets = ", ".join(f"{k}={data[k]}" for k in ("train_subset", "test_subset") if data.get(k))
        seen.add(f"profile `{profile}`, data `{source}`" + (f" ({subsets})" if subsets else ""))
    line = "Setup: " + ("; ".join(sorted(seen)) if seen else "unknown (no config.yaml in the run folders)") + "."
    if any(r.setting()["differs"] != "no" for r in results):
        line += (
            " Not the article's setting (the column *not as in the article* says how): compare the shape of the"
            " numbers, not their values."
        )
    return line


def _ladder_row(rung: str, result: RungResult | None, shown: Sequence[Column]) -> list[str]:
    """A rung's row of report.md's table: mean (± CI) over its seeds, or the column's text, beside the article's
    figures ("ref."); ``—`` when not finished."""
    info = get_rung(rung)
    ref = info.reference  # the article's figures; {} for a rung it did not train
    cells = [f"`{rung}`", info.description, "—" if result is None else _fmt(result, "test_acc", 100, 1, "%")]
    cells.append(f"{ref['test_acc']:.1%}" if "test_acc" in ref else "—")
    for column in shown:
        if result is None:
            cell = "—"
        elif column.text:
            cell = column.text(result.values)
        else:
            cell = _fmt(result, column.key, digits=column.digits, ci=column.ci)
        if cell != "—" and (has := len(result.values(column.key))) < len(result.runs):  # e.g. one not analysed
            cell += f" ({has} of {len(result.runs)} seeds)"
        cells += [cell, *([column.reference(ref)] if column.reference else [])]
    if result is None:
        return [*cells, "—", "0", "not finished"]
    links = ", ".join(f"[{r.path.name}]({r.path.name}/analysis/)" for r in result.runs)
    return [*cells, result.setting()["differs"] if ref else "—", str(len(result.runs)), links]


def _markdown(results: list[RungResult], ladder_dir: Path) -> str:
    by_rung = {r.rung: r for r in results}
    shown = [column for column in probe_columns(results) if column.header]
    probes = [cell for column in shown for cell in [column.header, *(["ref."] if column.reference else [])]]
    header = ["rung", "adds", "test acc.", "ref.", *probes, "not as in the article", "seeds", "figures"]
    over_seeds = ", as mean ± 95% CI (Student t) over seeds." if any(len(r.runs) > 1 for r in results) else "."
    lines = [f"# Ladder report: `{ladder_dir.name}`", "", _setup_line(results), ""]
    lines += [f"Project figures beside the reference (one seed of a GPU run){over_seeds}", ""]
    lines += _md_table(header, [_ladder_row(rung, by_rung.get(rung), shown) for rung in rung_names()])
    lines += ["", TWO_DISTANCES, "", "## What each rung trained", "", ARTICLE, ""]
    trained = [[f"`{r.rung}`", *(text for key, text in r.setting().items() if key != "differs")] for r in results]
    lines += [*_md_table(TRAINED, trained), "", "## Figures", ""]
    drawn = [value.short for value in probe_layers(results) if value.figure]
    lines += [line for short in drawn for line in (f"![{short} per layer]({short}_by_layer.png)", "")]
    lines += [*_tracking_lines(results), "![three made-up heads](explainer.png)", ""]
    per_run = "".join(f"`{m.short}.png`, " for m in declared("figures"))
    lines += [
        f"Per run: `<run>/analysis/` holds `heads.csv`, `layers.csv`, {per_run}`cls_attention.png` and, when "
        "tracked, `locality.png`. Table: [ladder.csv](ladder.csv).",
        "",
    ]
    if demos := sorted(ladder_dir.glob("*/demo/index.html")):
        hover = "Hover a patch to see where it looks in every layer and head (opens from disk):"
        links = [f"- [{d.parent.parent.name}]({d.relative_to(ladder_dir).as_posix()})" for d in demos]
        lines += ["## Browser demo", "", hover, "", *links, ""]
    return "\n".join(lines)


def _tracking_lines(results: list[RungResult]) -> list[str]:
    """report.md's lines on tracking_by_epoch.png: what it draws, and the rungs left out of it (none tracked)."""
    tracked = [column for column in probe_columns(results) if column.track]
    if not tracked:
        return []
    names = "; ".join(column.header or column.key for column in tracked)
    text = (
        f"Tracked during training, a panel each: {names}. One line per rung (the mean over its seeds) from "
        "initialisation (epoch 0) on, as each run's metrics.csv holds it (`track/`)."
    )
    if untracked := [r.rung for r in results if not any(r.tracked(column.track) for column in tracked)]:
        text += f" Left out, with nothing tracked: {', '.join(f'`{rung}`' for rung in untracked)}."
    return [f"![tracked during training, one line per rung]({TRACKING_PNG})", "", text, ""]


def _uniform_lines(results: list[RungResult], uniform: dict[str, list[float]]) -> dict[str, float]:
    """A figure's dashed lines: each rung's value under uniform attention (``uniform``: rung -> values, the first
    one drawn), labelled with its patch grid: ln T of the uniform entropy in its layers.csv, T = 1 + g*g."""
    lines = {}
    for result in (result for result in results if uniform.get(result.rung)):
        value, entropy = uniform[result.rung][0], result.by_layer("uniform_entropy_nats")
        grid = math.isqrt(round(math.exp(entropy[0])) - 1) if entropy else None
        lines[f"uniform{f', {grid}x{grid} grid' if grid else ''} ({value:.2f})"] = value
    return lines


def _save_figures(results: list[RungResult], ladder_dir: Path) -> None:
    """The PNGs of figures(): the per-layer values drawn, one line per rung, and the tracked columns against epoch."""
    for value in (value for value in probe_layers(results) if value.figure):  # <short>_by_layer.png
        series = {r.rung: values for r in results if (values := r.by_layer(value.name, value.table))}
        uniform = {r.rung: r.by_layer(value.uniform, value.table) for r in results} if value.uniform else {}
        title = f"{ladder_dir.name}: {value.label} per layer, every rung"
        figure = plot_layer_lines(series, _uniform_lines(results, uniform), value.axis_label, title)
        save_figure(figure, ladder_dir / f"{value.short}_by_layer.png")
    panels = []
    for column in (column for column in probe_columns(results) if column.track):  # tracking_by_epoch.png
        series = {r.rung: (list(points), list(points.values())) for r in results if (points := r.tracked(column.track))}
        uniform = {r.rung: r.values(column.uniform) for r in results if r.rung in series} if column.uniform else {}
        panels.append((column.header or column.key, series, _uniform_lines(results, uniform)))
    if panels:
        title = f"{ladder_dir.name}: during training, every rung"
        save_figure(plot_epoch_lines(panels, title), ladder_dir / TRACKING_PNG)
    save_figure(plot_explainer(), ladder_dir / "explainer.png")


def build_report(ladder_dir: str | Path) -> Path:
    """Write report.md, ladder.csv and the charts for the finished rungs of ``ladder_dir``; returns report.md."""
    ladder_dir = Path(ladder_dir)
    results = collect(ladder_dir)
    keys = ladder_columns(results)
    csv_columns = ["rung", *keys, *SETTING_COLUMNS]
    if any(len(r.runs) > 1 for r in results):  # several seeds: the intervals
        ci = ["test_acc", *(column.key for column in probe_columns(results) if column.ci)]
        csv_columns += ["n_seeds", *(f"{key}_ci95" for key in ci)]
    rows = [{column: rounded(row[column]) for column in csv_columns} for row in (r.row(keys) for r in results)]
    write_csv(ladder_dir / "ladder.csv", csv_columns, rows)
    _save_figures(results, ladder_dir)
    report = ladder_dir / "report.md"
    write_text(report, _markdown(results, ladder_dir))
    return report
