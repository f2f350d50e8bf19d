"""A run folder holding a small random ViT, its exported demo, and a headless Chromium to open it."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tiny_data import tiny_data

from vitladder.atomic import save_safetensors
from vitladder.config import compose_rung
from vitladder.model import ViTConfig, build_vit

TINY_DATA = ["profile=smoke", *tiny_data(num_train=300, num_test=60, val_size=50)]
NUM_IMAGES = 5
TEST_ACC = 0.4242
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


NORMALIZATION = {"mean": [0.2, 0.5, 0.8], "std": [0.1, 0.3, 0.05]}


def random_vit(patch_size: int = 4, sharpen: float = 8.0) -> torch.nn.Module:
    """The project's 7 x 6 ViT at width 48, random but with peaked attention: query and key
    weights scaled up so that maps differ clearly from patch to patch (random init is near uniform)."""
    torch.manual_seed(0)
    model = build_vit(ViTConfig(patch_size=patch_size, embed_dim=48))
    with torch.no_grad():
        for block in model.blocks:
            dim = block.attn.qkv.weight.shape[1]
            block.attn.qkv.weight[: 2 * dim] *= sharpen  # rows of q and k, not v
    return model.eval()


def write_run(
    root: Path, rung: str = "patch4", patch_size: int = 4, done: bool = True, classes=None, model_pt: bool = False
) -> Path:
    """A run folder as train_rung writes it: config.yaml, checkpoints/model.safetensors, done.json; with
    ``model_pt``, checkpoints/model.pt instead, as versions before model.safetensors wrote it (torch.save)."""
    cfg = compose_rung(rung, [*TINY_DATA, f"output_root={root}", f"model.patch_size={patch_size}"])
    run_dir = Path(cfg.run_dir)
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    model = random_vit(patch_size)
    header = {
        "format": "vitladder-model/1",
        "vit_config": ViTConfig(patch_size=patch_size, embed_dim=48).to_dict(),
        "classes": classes or [f"class{i}" for i in range(10)],
        "normalization": NORMALIZATION,  # far from CIFAR-10's: a demo that ignored it would differ
        "rung": rung,
        "ladder": str(cfg.ladder),
    }
    if model_pt:
        torch.save({**header, "state_dict": model.state_dict()}, run_dir / "checkpoints" / "model.pt")
    else:
        save_safetensors(model.state_dict(), header, run_dir / "checkpoints" / "model.safetensors")
    if done:
        (run_dir / "done.json").write_text(json.dumps({"rung": rung, "test_acc": TEST_ACC, "val_acc": 0.4}))
    return run_dir


@pytest.fixture(scope="session")
def tiny_data() -> list[str]:
    """Overrides that make any rung's data a tiny synthetic set."""
    return list(TINY_DATA)


@pytest.fixture(scope="session")
def make_run():
    """``make_run(root, rung=..., patch_size=..., done=..., classes=..., model_pt=...)``: write_run for tests that
    need another run."""
    return write_run


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("demo_run"))


@pytest.fixture(scope="session")
def demo_index(demo_run: Path) -> Path:
    from vitladder.demo.export import export_demo

    return export_demo(demo_run, num_images=NUM_IMAGES)


def chromium_path() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
    )
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium browser: install Debian's package (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        except Exception as error:  # a browser that cannot start here is an environment problem, not a bug
            pytest.skip(f"Chromium at {executable} does not start: {str(error).strip().splitlines()[0][:200]}")
        yield browser
        browser.close()


@dataclass
class OpenPage:
    page: object  # playwright.sync_api.Page
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page asked for


def open_page(browser, url: str) -> OpenPage:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    opened = OpenPage(page)
    page.on("console", lambda msg: opened.errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda error: opened.errors.append(str(error)))
    page.on("request", lambda request: opened.requests.append(request.url))
    page.goto(url)
    page.wait_for_selector("#maps canvas.map")
    return opened


@pytest.fixture(scope="session")
def page_opener():
    """``page_opener(browser, url)`` -> OpenPage, collecting console errors."""
    return open_page


@pytest.fixture
def demo_page(browser, demo_index: Path):
    opened = open_page(browser, demo_index.resolve().as_uri())
    yield opened
    opened.page.close()
