"""The ladder report from hand-written run folders: one seed, three seeds (t-interval), partial ladders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from entry_points import load_script
from extensions import add_confidence_probe_here
from PIL import Image

from vitladder.analysis.figures import save_figure
from vitladder.analysis.outputs import read_csv, write_csv
from vitladder.analysis.probes import columns
from vitladder.config import compose_rung, get_rung, rung_names
from vitladder.report import ladder_report
from vitladder.report.ladder_report import build_report, collect, figures, mean_ci, t_quantile_975
from vitladder.report.report_run import charts, log_report_to_wandb, report_tables, rung_lines
from vitladder.report.setting import SETTING_COLUMNS, analysed, differences
from vitladder.run_folder import read_summary
from vitladder.wandb.report import build_wandb_report

REPO = Path(__file__).resolve().parents[2]
ATTENTION_COLUMNS = [  # the attention probe's, first in the default list of probes
    "layer1_distance_px",
    "uniform_distance_px",
    "layer1_entropy_nats",
    "uniform_entropy_nats",
    "layer1_distance_drop_px",
    "uniform_distance_drop_px",
]
PROBE_COLUMNS = [column.key for column in columns(compose_rung("patch8", []).analysis.probes)]  # the default list
LADDER_COLUMNS = ["rung", "test_acc", *PROBE_COLUMNS, *SETTING_COLUMNS]
# done.json's record of what a smoke run trained (training.results.rung_summary, ImageDataModule.facts)
SMOKE_SETTING = {
    "epochs": 1,
    "epochs_planned": 1,
    "steps": 54,
    "steps_per_epoch": 54,
    "data": "synthetic images",
    "train_images": 3500,
    "val_images": 500,
    "test_images": 500,
    "test_order": "seeded",
    "analysis_images": 100,
}
# ... and of a full run on the official pixels with every training image: the article's setting
ARTICLE_SETTING = {
    **SMOKE_SETTING,
    "epochs": 100,
    "epochs_planned": 100,
    "steps": 39_100,
    "steps_per_epoch": 391,
    "data": "official CIFAR-10 pixels",
    "train_images": 50_000,
    "val_images": 0,
    "test_images": 10_000,
    "test_order": "official",
    "analysis_images": 1000,
    "model": {"embed_dim": 384, "depth": 7, "num_heads": 6, "mlp_ratio": 4.0},
}


def make_run(
    ladder: Path,
    rung: str,
    seed: int = 0,
    test_acc: float = 0.5,
    layer1: float = 12.0,
    entropy1: float = 3.0,
    analysed: bool = True,
    finished: bool = True,
    setting: dict | None = None,
    tracked: dict[int, dict[str, float]] | None = None,
    probes: list[str] | None = None,
) -> Path:
    """A run folder as train_rung + the analysis callback leave it (only the files the report reads); ``tracked``:
    {epoch: {name: value}}, metrics.csv's track/ columns; ``probes``: analysis.probes (None: not recorded)."""
    run = ladder / (rung if seed == 0 else f"{rung}-seed{seed}")
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"rung: {rung}\nladder: {ladder.name}\nseed: {seed}\nprofile:\n  name: smoke\n"
        "data:\n  source: synthetic\n  test_subset: 500\nanalysis:\n  num_images: 100\n"
        + (f"  probes: [{', '.join(probes)}]\n" if probes else "")
        + "wandb:\n  project: vitladder-tests\n"
    )
    tracked = tracked or {}
    names = sorted({name for values in tracked.values() for name in values})
    rows = [{"epoch": epoch, **{f"track/{k}": v for k, v in values.items()}} for epoch, values in tracked.items()]
    rows.append({"step": 3, "lr": 1e-3})  # a learning-rate row: a step, no epoch
    write_csv(run / "metrics.csv", ["epoch", "step", "lr", *(f"track/{name}" for name in names)], rows)
    patch8 = rung in ("patch8", "augment")
    uniform, uniform_h = (16.064, math.log(17)) if patch8 else (16.546, math.log(65))
    scalars = {}  # the attention probe's numbers in done.json (probes/attention.py), once analysed
    if analysed:
        rows = [
            {
                "layer": layer,
                "distance_px": layer1 if layer == 1 else 15.0 + 0.1 * layer,
                "entropy_nats": entropy1 if layer == 1 else 3.5,
                "cls_share": 0.05,
                "uniform_distance_px": uniform,
                "uniform_entropy_nats": uniform_h,
                "distance_drop_px": layer1 - 0.5 if layer == 1 else 10.0,
                "uniform_distance_drop_px": uniform * (16 if patch8 else 64) / (17 if patch8 else 65),
            }
            for layer in range(7)
        ]
        write_csv(run / "analysis" / "layers.csv", list(rows[0]), rows)
        for name in ("distance_px", "entropy_nats", "distance_drop_px"):
            scalars |= {f"layer1_{name}": rows[1][name], f"uniform_{name}": rows[1][f"uniform_{name}"]}
    if finished:
        (run / "done.json").write_text(
            json.dumps(
                {
                    "rung": rung,
                    "ladder": ladder.name,
                    "seed": seed,
                    **(SMOKE_SETTING if setting is None else setting),
                    "test_acc": test_acc,
                    "test_loss": 1.0,
                    "val_acc": test_acc,
                    **scalars,
                }
            )
        )
    return run


def assert_png(path: Path) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG" and min(image.size) > 200


def test_one_seed_full_ladder(tmp_path: Path) -> None:
    ladder = tmp_path / "smoke"
    for i, rung in enumerate(rung_names()):
        make_run(ladder, rung, test_acc=0.5 + i / 100, layer1=15.0 - i)
    (ladder / "wandb").mkdir()  # other folders are ignored
    report = build_report(ladder)

    rows = read_csv(ladder / "ladder.csv")
    assert list(rows[0]) == LADDER_COLUMNS and PROBE_COLUMNS[: len(ATTENTION_COLUMNS)] == ATTENTION_COLUMNS
    assert [r["rung"] for r in rows] == list(rung_names())
    assert float(rows[2]["test_acc"]) == pytest.approx(0.52)
    assert float(rows[2]["layer1_distance_px"]) == pytest.approx(13.0)
    assert float(rows[0]["uniform_distance_px"]) == pytest.approx(16.064)
    assert float(rows[7]["uniform_distance_px"]) == pytest.approx(16.546)
    assert float(rows[7]["layer1_entropy_nats"]) == pytest.approx(3.0)

    text = report.read_text()
    assert report == ladder / "report.md"
    for rung in rung_names():  # the project's numbers beside the reference ones
        assert f"`{rung}`" in text and f"{get_rung(rung).reference['test_acc']:.1%}" in text
    assert "52.0%" in text and "| 13.0 |" in text and "15.8 (16.1)" in text and "8.1 (16.5)" in text
    assert "±" not in text.split("## Figures")[0].split("|---|")[1]  # one seed: no intervals in the table
    assert "(patch8/analysis/)" in text and "profile `smoke`" in text and "Not the article's setting" in text
    for name in ("distance_by_layer.png", "entropy_by_layer.png", "tracking_by_epoch.png", "explainer.png"):
        assert f"]({name})" in text
        assert_png(ladder / name)


def test_three_seeds_give_mean_and_t_interval(tmp_path: Path) -> None:
    ladder = tmp_path / "seeds"
    accs, dists = [0.80, 0.84, 0.83], [10.0, 11.5, 9.0]
    for seed, (acc, dist) in enumerate(zip(accs, dists)):
        make_run(ladder, "warmup", seed=seed, test_acc=acc, layer1=dist)
    make_run(ladder, "patch4", test_acc=0.7, layer1=14.0)
    build_report(ladder)

    rows = {r["rung"]: r for r in read_csv(ladder / "ladder.csv")}
    assert list(rows) == ["patch4", "warmup"]  # ladder order, only finished rungs
    assert list(next(iter(rows.values())))[: len(LADDER_COLUMNS)] == LADDER_COLUMNS
    warmup = rows["warmup"]
    # by hand: t_{0.975, 2} = 4.302653, half-width = t * s / sqrt(n)
    mean = sum(accs) / 3
    sd = math.sqrt(sum((a - mean) ** 2 for a in accs) / 2)
    assert float(warmup["test_acc"]) == pytest.approx(mean, abs=1e-6)
    assert float(warmup["test_acc_ci95"]) == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-4)
    dmean = sum(dists) / 3
    dsd = math.sqrt(sum((d - dmean) ** 2 for d in dists) / 2)
    assert float(warmup["layer1_distance_px"]) == pytest.approx(dmean, abs=1e-6)
    assert float(warmup["layer1_distance_px_ci95"]) == pytest.approx(4.302653 * dsd / math.sqrt(3), rel=1e-4)
    assert warmup["n_seeds"] == "3" and rows["patch4"]["n_seeds"] == "1" and rows["patch4"]["test_acc_ci95"] == ""

    text = (ladder / "report.md").read_text()
    assert f"{100 * mean:.1f}% ± {100 * 4.302653 * sd / math.sqrt(3):.1f}" in text
    assert "[warmup-seed2](warmup-seed2/analysis/)" in text and "95% CI" in text


def test_unfinished_and_unanalysed_runs(tmp_path: Path) -> None:
    ladder = tmp_path / "partial"
    make_run(ladder, "patch8", test_acc=0.55, layer1=15.5)
    make_run(ladder, "augment", finished=False)  # still training: left out
    make_run(ladder, "patch4", test_acc=0.7, analysed=False)  # finished, no analysis yet
    build_report(ladder)
    rows = read_csv(ladder / "ladder.csv")
    assert [r["rung"] for r in rows] == ["patch8", "patch4"]
    assert rows[1]["test_acc"] == "0.7" and rows[1]["layer1_distance_px"] == ""
    assert "not finished" in (ladder / "report.md").read_text()


def test_a_cell_from_fewer_seeds_than_its_rung_has_says_how_many(tmp_path: Path) -> None:
    ladder = tmp_path / "mixed"
    make_run(ladder, "warmup", seed=0, test_acc=0.8, layer1=10.0)
    make_run(ladder, "warmup", seed=1, test_acc=0.8, analysed=False)  # trained; its analysis not run (yet)
    make_run(ladder, "patch4", seed=0, layer1=14.0)
    build_report(ladder)
    lines = (ladder / "report.md").read_text().splitlines()
    warmup, patch4 = (next(line for line in lines if line.startswith(f"| `{rung}`")) for rung in ("warmup", "patch4"))
    warmup, patch4 = ([cell.strip() for cell in row.split("|")] for row in (warmup, patch4))
    assert "80.0% ± 0.0" in warmup and "10.0 (1 of 2 seeds)" in warmup and "3.00 (1 of 2 seeds)" in warmup
    assert "14.0" in patch4 and not any("seeds)" in cell for cell in patch4)
    assert read_csv(ladder / "ladder.csv")[1]["layer1_distance_px"] == "10.0"  # the seeds that have it


@pytest.mark.parametrize(
    "df, expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (30, 2.0423), (40, 2.0211), (100, 1.9840), (10**6, 1.9600)]
)
def test_t_quantiles(df: int, expected: float) -> None:
    assert t_quantile_975(df) == pytest.approx(expected, abs=2e-4)


def test_mean_ci_single_value() -> None:
    assert mean_ci([3.0]) == (3.0, None)


def test_report_script(tmp_path: Path, capsys) -> None:
    ladder = tmp_path / "smoke"
    make_run(ladder, "patch8")
    report = load_script("report").main([str(ladder), "--wandb-mode", "disabled"])
    assert report.is_file() and "1 rungs (1 runs)" in capsys.readouterr().out

    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        load_script("report").main([str(tmp_path / "empty"), "--wandb-mode", "disabled"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no finished rung" in err


def test_report_run_tables_carry_seeds_and_intervals(tmp_path: Path, wandb_run_reader) -> None:
    ladder = tmp_path / "smoke"
    accs = [0.80, 0.84, 0.83]
    for seed, acc in enumerate(accs):
        make_run(ladder, "warmup", seed=seed, test_acc=acc, layer1=10.0 + seed)
    make_run(ladder, "patch4", layer1=13.0)
    build_report(ladder)
    run_id = log_report_to_wandb(ladder, mode="offline")
    (folder,) = (ladder / "wandb").glob(f"offline-run-*-{run_id}")
    run = wandb_run_reader(folder)
    assert run.summary["report/patch4/layer1_distance_px"] == pytest.approx(13.0)

    ladder_table = run.table("report/ladder")
    columns = ladder_table["columns"]
    assert columns[:4] == ["rung", "rung_index", "seeds", "n_seeds"] and "ref_test_acc" in columns
    rows = {row[0]: dict(zip(columns, row)) for row in ladder_table["data"]}
    names = rung_names()
    assert list(rows) == list(names) and [r["rung_index"] for r in rows.values()] == list(range(len(names)))
    warmup = rows["warmup"]
    mean, half = mean_ci(accs)
    assert warmup["seeds"] == "0,1,2" and warmup["n_seeds"] == 3
    assert warmup["ref_test_acc"] == get_rung("warmup").reference["test_acc"]
    assert warmup["test_acc"] == pytest.approx(mean) and warmup["test_acc_ci95"] == pytest.approx(half)
    assert rows["patch8"]["n_seeds"] == 0 and rows["patch8"]["test_acc"] is None  # not run: the reference only
    # What each rung trained and where that is not the article's, and both readings of the distance.
    trained = ("1", "54", "synthetic images", 100)
    assert (warmup["epochs"], warmup["steps"], warmup["data"], warmup["ref_epochs"]) == trained
    assert warmup["differs"].startswith("1 of 100 epochs; synthetic images, not the official pixels")
    assert rows["patch4"]["layer1_distance_drop_px"] == pytest.approx(12.5)
    assert rows["patch4"]["uniform_distance_drop_px"] == pytest.approx(16.546 * 64 / 65)
    assert run.summary["report/patch4/layer1_distance_drop_px"] == pytest.approx(12.5)

    runs = run.table("report/runs")
    assert runs["columns"][:3] == ["rung", "rung_index", "seed"]
    assert sorted((r[0], r[2]) for r in runs["data"]) == [("patch4", 0), ("warmup", 0), ("warmup", 1), ("warmup", 2)]
    assert {dict(zip(runs["columns"], r))["analysed"] for r in runs["data"]} == {"a seeded sample of 100"}
    chart = run.table("report/test_acc_by_rung_table")
    series = {(r[0], r[3]): r[4] for r in chart["data"]}
    assert series[("warmup", "this project")] == pytest.approx(mean)
    assert series[("warmup", "this project, 95% CI high")] == pytest.approx(mean + half)
    assert series[("epochs200", "reference (article)")] == get_rung("epochs200").reference["test_acc"]
    assert ("patch4", "this project, 95% CI low") not in series  # one seed: no interval
    layers = run.table("report/layers")
    assert {(r[0], r[3]) for r in layers["data"]} == {
        (rung, layer) for rung in ("patch4", "warmup") for layer in range(7)
    }
    distance = {(r[0], r[3]) for r in run.table("report/layer1_distance_by_rung_table")["data"]}
    assert {
        (rung, series) for rung in rung_names() for series in ("uniform attention", "reference (article)")
    } <= distance
    for key in ("report/distance_px_by_layer", "report/entropy_nats_by_layer"):  # one line per rung over the layers
        fields = run.config[f"_wandb.visualize.{key}"]["panel_config"]["fieldSettings"]
        assert fields["x"] == "layer" and fields["stroke"] == "rung", key
    for key in ("report/test_acc_by_rung", "report/layer1_distance_by_rung"):  # ladder order on the x-axis
        assert run.config[f"_wandb.visualize.{key}"]["panel_config"]["fieldSettings"]["x"] == "rung_index", key


def test_corrupt_done_json_is_one_clean_error(tmp_path: Path, capsys) -> None:
    ladder = tmp_path / "smoke"
    run = make_run(ladder, "patch8")
    (run / "done.json").write_text("{not json")
    with pytest.raises(SystemExit) as exit_info:
        load_script("report").main([str(ladder), "--wandb-mode", "disabled"])
    assert exit_info.value.code == 2 and str(run) in capsys.readouterr().err


def test_layer_one_is_the_same_layer_in_done_json_layers_csv_and_the_report(tmp_path: Path) -> None:
    import torch

    from vitladder.analysis.outputs import done_scalars
    from vitladder.analysis.probes import Context, run_probes
    from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
    from vitladder.model import ViTConfig, build_vit

    one_layer = build_vit(ViTConfig(patch_size=8, embed_dim=24, depth=1))  # "layer 1" is its only layer
    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    results = run_probes(one_layer, images, torch.arange(4), Context("warmup", 0, 8, 4, CIFAR10_STATS), ["attention"])
    (layer,) = results["attention"].tables["layers"]
    run = make_run(tmp_path / "ladder", "warmup", analysed=False)
    (run / "done.json").write_text(json.dumps({**read_summary(run), **done_scalars(results, 4)}))
    (result,) = collect(tmp_path / "ladder")
    assert result.values("layer1_distance_px") == [pytest.approx(layer["distance_px"], abs=1e-6)]


def test_every_row_says_what_it_trained_and_where_that_is_not_the_articles_setting(tmp_path: Path) -> None:
    ladder = tmp_path / "full"
    make_run(ladder, "patch8", setting=ARTICLE_SETTING)
    stopped = {
        **ARTICLE_SETTING,
        "epochs": 37.41,  # trainer.max_time stopped the 38th epoch part way
        "epochs_planned": 40,
        "steps": 3_254,
        "steps_per_epoch": 87,
        "data": "the JPEG copy of CIFAR-10",
        "train_images": 45_000,
        "val_images": 5_000,
        "test_order": "seeded",
    }
    make_run(ladder, "epochs200", setting=stopped)
    make_run(ladder, "warmup", setting={"epochs": 100, "steps": 8_700})  # recorded before runs said what they are
    build_report(ladder)

    rows = {r["rung"]: r for r in read_csv(ladder / "ladder.csv")}
    assert {k: rows["patch8"][k] for k in SETTING_COLUMNS} == {
        "epochs": "100",
        "steps": "39100",
        "data": "official CIFAR-10 pixels",
        "train_images": "50000",
        "test_images": "10000",
        "analysed": "the official first 1,000",
        "differs": "no",
    }
    top = rows["epochs200"]
    assert (top["epochs"], top["steps"], top["train_images"]) == ("37.41 (the last one partial)", "3254", "45000")
    assert top["analysed"] == "a seeded sample of 1,000"
    assert top["differs"].split("; ") == [
        "37.41 (the last one partial) of 200 epochs",
        "the JPEG copy of CIFAR-10, not the official pixels",
        "45,000 training images, not 50,000",
        "attention over a seeded sample of 1,000 test images, not the official first 1,000",
    ]
    assert rows["warmup"]["data"] == "—" and "not recorded" in rows["warmup"]["differs"]

    text = (ladder / "report.md").read_text()
    table = text.split("## What each rung trained")[0]
    # In words beside the reference figures, on the row of the rung they belong to.
    (top_row,) = [line for line in table.splitlines() if line.startswith("| `epochs200` |")]
    assert "92.9%" in top_row and "37.41 (the last one partial) of 200 epochs" in top_row
    (first_row,) = [line for line in table.splitlines() if line.startswith("| `patch8` |")]
    assert "| no |" in first_row
    trained = text.split("## What each rung trained")[1].split("## Figures")[0]
    top = "| `epochs200` | 37.41 (the last one partial) | 3,254 | the JPEG copy of CIFAR-10 | 45,000 | 10,000 |"
    assert top in trained
    assert "a seeded sample of 1,000 |" in trained and "| `patch8` | 100 | 39,100 | official CIFAR-10 pixels" in trained
    assert "all 50,000" in trained  # the article's setting, spelt out


def test_a_longer_run_and_an_unanalysed_one_say_so_in_words() -> None:
    assert differences(ARTICLE_SETTING, 100) == []
    assert differences({**ARTICLE_SETTING, "epochs": 300, "epochs_planned": 300}, 100) == ["300 epochs, not 100"]
    unanalysed = {key: value for key, value in ARTICLE_SETTING.items() if key != "analysis_images"}
    assert analysed(unanalysed) == "none (not analysed)"
    assert differences(unanalysed, 100) == ["attention not analysed"]


def test_both_readings_of_the_distance_are_reported(tmp_path: Path) -> None:
    ladder = tmp_path / "smoke"
    make_run(ladder, "patch4", layer1=13.0)  # CLS dropped: 12.5 in layer 1
    make_run(ladder, "patch8", layer1=15.0)
    build_report(ladder)
    rows = {r["rung"]: r for r in read_csv(ladder / "ladder.csv")}
    assert float(rows["patch4"]["layer1_distance_drop_px"]) == pytest.approx(12.5)
    assert float(rows["patch4"]["uniform_distance_drop_px"]) == pytest.approx(16.546 * 64 / 65)  # 16.29
    assert float(rows["patch8"]["uniform_distance_drop_px"]) == pytest.approx(16.064 * 16 / 17)
    text = (ladder / "report.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| rung | adds |"))
    assert "layer-1 mean attention distance (px)" in header
    assert "layer-1 mean attention distance, CLS dropped (px)" in header
    (row,) = [line for line in text.split("## What")[0].splitlines() if line.startswith("| `patch4` |")]
    assert "| 13.0 | 14.0 (16.5) | 16.5 |" in row and "| 12.5 | 16.3 |" in row
    assert "renormalised over the patch keys" in text and "common in published code" in text


def test_a_narrower_model_says_so_from_done_json_or_from_an_older_runs_config(tmp_path: Path) -> None:
    """The smoke and laptop profiles train the article's 7 x 6 shape at width 48: never as the article's row."""
    ladder = tmp_path / "laptop"
    laptop = {**ARTICLE_SETTING, "model": {**ARTICLE_SETTING["model"], "embed_dim": 48}}
    make_run(ladder, "patch8", setting=laptop)
    older = make_run(ladder, "augment", setting={k: v for k, v in ARTICLE_SETTING.items() if k != "model"})
    with (older / "config.yaml").open("a") as config:  # done.json from before it recorded the model
        config.write("model:\n  embed_dim: 48\n  depth: 7\n  num_heads: 6\n  mlp_ratio: 4.0\n  patch_size: 8\n")
    make_run(ladder, "patch4", setting=ARTICLE_SETTING)
    build_report(ladder)
    rows = {r["rung"]: r for r in read_csv(ladder / "ladder.csv")}
    assert rows["patch8"]["differs"] == rows["augment"]["differs"] == "width 48, not 384"
    assert rows["patch4"]["differs"] == "no"
    table = (ladder / "report.md").read_text().split("## What each rung trained")[0]
    (row,) = [line for line in table.splitlines() if line.startswith("| `patch8` |")]
    assert "| width 48, not 384 |" in row


@pytest.fixture
def drawn(monkeypatch) -> dict:
    """The figures the report saves, by file name, kept to read their lines back."""
    saved = {}

    def keep(figure, path):
        saved[Path(path).name] = figure
        return save_figure(figure, path)

    monkeypatch.setattr(ladder_report, "save_figure", keep)
    return saved


def rung_lines_of(ax) -> dict[str, tuple[list, list]]:
    """A panel's lines but its dashed references: {label: (x, y)}."""
    return {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
        for line in ax.get_lines()
        if not line.get_label().startswith("uniform")
    }


def test_the_values_tracked_during_training_are_one_figure_one_line_per_rung(tmp_path: Path, drawn: dict) -> None:
    ladder = tmp_path / "smoke"
    distance = {0: 16.5, 1: 15.9, 2: 15.1}
    make_run(
        ladder,
        "patch4",
        tracked={e: {"layer1/distance_px": d, "position_grid_correlation": -0.1 * e} for e, d in distance.items()},
    )
    make_run(ladder, "warmup", seed=0, tracked={0: {"layer1/distance_px": 16.4}, 1: {"layer1/distance_px": 15.0}})
    make_run(ladder, "warmup", seed=1, tracked={0: {"layer1/distance_px": 16.6}, 1: {"layer1/distance_px": 14.0}})
    make_run(ladder, "patch8")  # trained before its values were tracked: no track/ column in its metrics.csv
    text = build_report(ladder).read_text()

    assert_png(ladder / "tracking_by_epoch.png")
    assert "![tracked during training, one line per rung](tracking_by_epoch.png)" in text
    assert "Left out, with nothing tracked: `patch8`." in text
    distance_panel, entropy_panel, positions_panel = drawn["tracking_by_epoch.png"].axes
    assert [ax.get_title() for ax in (distance_panel, entropy_panel, positions_panel)] == [
        "layer-1 mean attention distance (px)",
        "layer-1 entropy (nats)",
        "position embeddings: ρ(similarity, distance)",
    ]
    assert rung_lines_of(distance_panel) == {
        "patch4": ([0, 1, 2], pytest.approx([16.5, 15.9, 15.1])),
        "warmup": ([0, 1], pytest.approx([16.5, 14.5])),  # the mean of its two seeds
    }
    assert {line.get_label() for line in distance_panel.get_lines()} >= {"uniform, 8x8 grid (16.55)"}
    assert rung_lines_of(entropy_panel) == {}  # tracked by none of them
    assert rung_lines_of(positions_panel) == {"patch4": ([0, 1, 2], pytest.approx([0.0, -0.1, -0.2]))}
    assert positions_panel.get_ylim()[0] < -0.2  # a negative correlation is drawn, not cut off at 0


def test_a_probes_declarations_reach_the_report_its_wandb_run_and_the_saved_report(
    tmp_path: Path, monkeypatch, drawn: dict
) -> None:
    """The toy probe of tests/extensions.py, one file in the probes package and named in the runs' analysis.probes:
    its per-layer value and its columns (tracked, charted by rung) reach the report's figures, the W&B report run's
    tables and charts and the saved W&B Report's panels, with no other edit."""
    import wandb_workspaces.reports.v2 as wr

    add_confidence_probe_here(tmp_path / "probes", monkeypatch)
    probes = ["attention", "cls_attention", "confidence"]
    ladder = tmp_path / "smoke"
    for rung, confidence in (("patch4", 0.6), ("warmup", 0.8)):
        run = make_run(ladder, rung, tracked={0: {"confidence": 0.1}, 1: {"confidence": confidence}}, probes=probes)
        layers = [{"layer": layer, "read_out": confidence * layer / 6} for layer in range(7)]
        write_csv(run / "analysis" / "confidence_by_layer.csv", ["layer", "read_out"], layers)
        (run / "done.json").write_text(json.dumps({**read_summary(run), "mean_confidence": confidence}))
    text = build_report(ladder).read_text()
    results = collect(ladder)

    assert "confidence_by_layer.png" in figures(results) and "](confidence_by_layer.png)" in text
    (panel,) = drawn["confidence_by_layer.png"].axes
    assert panel.get_ylabel() == "read-out confidence"
    assert rung_lines_of(panel)["warmup"] == (list(range(7)), pytest.approx([0.8 * layer / 6 for layer in range(7)]))
    tracked = {ax.get_title(): ax for ax in drawn["tracking_by_epoch.png"].axes}
    assert rung_lines_of(tracked["mean confidence"]) == {
        "patch4": ([0, 1], pytest.approx([0.1, 0.6])),
        "warmup": ([0, 1], pytest.approx([0.1, 0.8])),
    }
    assert "mean confidence" in text.split("](tracking_by_epoch.png)")[1].split("\n\n")[1]

    tables = report_tables(results)
    columns, rows = tables["layers"]
    patch4 = [row[columns.index("read_out")] for row in rows if row[0] == "patch4"]
    assert patch4 == pytest.approx([0.6 * layer / 6 for layer in range(7)])
    by_rung = {(row[0], row[3]): row[4] for row in tables["confidence_by_rung"][1]}
    assert by_rung == {("patch4", "this project"): 0.6, ("warmup", "this project"): 0.8}
    chart = charts(results)
    assert chart["report/read_out_by_layer"] == ("layers", "layer", "read_out", "rung", "read-out confidence by layer")
    by_rung_chart = ("confidence_by_rung", "rung_index", "mean_confidence", "series", "mean confidence by rung")
    assert chart["report/confidence_by_rung"] == by_rung_chart
    during = ("epoch", "track/confidence", "mean confidence during training (0 = initialisation)")
    assert during in rung_lines(results)

    report = build_wandb_report("vit-ladder", "an-entity", "smoke", charts(results), rung_lines(results))
    panels = [panel for block in report.blocks if isinstance(block, wr.PanelGrid) for panel in block.panels]
    assert ["track/confidence"] in [panel.y for panel in panels if isinstance(panel, wr.LinePlot)]
    custom = {panel.query["summaryTable"]["tableKey"] for panel in panels if isinstance(panel, wr.CustomChart)}
    assert {"report/read_out_by_layer_table", "report/confidence_by_rung_table"} <= custom
