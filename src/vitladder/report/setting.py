"""What a result trained (done.json, ``training.results.rung_summary``) and, in words, where that differs from the
article's setting: said beside every result so that a short run or a copy of the data never reads as the article's."""

from __future__ import annotations

from collections.abc import Mapping

from vitladder.data.sources import OFFICIAL_CIFAR10

# The article's setting, as far as it states it (its epochs per rung are each rung's reference `epochs`).
ARTICLE_TRAIN_IMAGES = 50_000  # not stated: CIFAR-10's whole training set, presumably
ARTICLE_TEST_IMAGES = 10_000  # test accuracy over CIFAR-10's test set
ARTICLE_ANALYSED = 1_000  # attention over the official first 1,000 test images
# The article's model beside each rung's patch size (docs/design.md §2): done.json's ``model``, in words.
ARTICLE_MODEL = {
    "embed_dim": ("width", 384),
    "depth": ("layers", 7),
    "num_heads": ("heads", 6),
    "mlp_ratio": ("MLP ratio", 4.0),
}
ARTICLE = (
    "The article's setting: the official CIFAR-10 pixels, 100 epochs a rung (200 for the last), test accuracy "
    "over the 10,000 test images, attention over the official first 1,000 of them; it does not say how many "
    "training images it used, so this report assumes all 50,000."
)

# What ladder.csv and the W&B report run add per rung: what it trained, on which images.
SETTING_COLUMNS = ("epochs", "steps", "data", "train_images", "test_images", "analysed", "differs")
NOT_RECORDED = "not recorded (a run from before results said what they are)"


def epochs_text(done: Mapping) -> str:
    """``100``, or ``37.41 (the last one partial)`` when trainer.max_time stopped an epoch part way."""
    epochs = done["epochs"]
    return f"{epochs}" if float(epochs).is_integer() else f"{epochs} (the last one partial)"


def analysed(done: Mapping) -> str:
    """Which test images the attention was measured on: ``the official first 1,000``, ``a seeded sample of 1,000``."""
    if "test_order" not in done:
        return NOT_RECORDED
    if not done.get("analysis_images"):
        return "none (not analysed)"
    images = f"{done['analysis_images']:,}"
    return f"the official first {images}" if done["test_order"] == "official" else f"a seeded sample of {images}"


def differences(done: Mapping, reference_epochs: int | None) -> list[str]:
    """Where a run's setting differs from the article's, in words; [] when it is the article's."""
    if "test_order" not in done:
        return [f"setting {NOT_RECORDED}"]
    model = done.get("model") or {}
    words = [
        f"{name} {model[key]:g}, not {article:g}"
        for key, (name, article) in ARTICLE_MODEL.items()
        if model.get(key) is not None and model[key] != article
    ]
    if reference_epochs is not None and done["epochs"] < reference_epochs:
        words.append(f"{epochs_text(done)} of {reference_epochs} epochs")
    elif reference_epochs is not None and done["epochs"] > reference_epochs:
        words.append(f"{epochs_text(done)} epochs, not {reference_epochs}")
    if done["data"] != OFFICIAL_CIFAR10:
        words.append(f"{done['data']}, not the official pixels")
    if done["train_images"] != ARTICLE_TRAIN_IMAGES:
        words.append(f"{done['train_images']:,} training images, not {ARTICLE_TRAIN_IMAGES:,}")
    if done["test_images"] != ARTICLE_TEST_IMAGES:
        words.append(f"test accuracy over {done['test_images']:,} images, not {ARTICLE_TEST_IMAGES:,}")
    if not done.get("analysis_images"):
        words.append("attention not analysed")
    elif (done["test_order"], done.get("analysis_images")) != ("official", ARTICLE_ANALYSED):
        words.append(f"attention over {analysed(done)} test images, not the official first {ARTICLE_ANALYSED:,}")
    return words


def setting_row(runs: list[Mapping], reference_epochs: int | None, number: str) -> dict[str, str]:
    """SETTING_COLUMNS for a rung's runs (their done.json), as text: one value, or each seed's apart (``a / b``);
    counts formatted with ``number`` (``"{}"`` for a CSV)."""

    def joined(text) -> str:  # the distinct values, in seed order
        return " / ".join(dict.fromkeys(text(done) for done in runs))

    def recorded(key: str, fmt: str = "{}") -> str:
        return joined(lambda done: fmt.format(done[key]) if key in done else "—")

    return {
        "epochs": joined(lambda done: epochs_text(done) if "epochs" in done else "—"),
        "steps": recorded("steps", number),
        "data": recorded("data"),
        "train_images": recorded("train_images", number),
        "test_images": recorded("test_images", number),
        "analysed": joined(analysed),
        "differs": joined(lambda done: "; ".join(differences(done, reference_epochs)) or "no"),
    }
