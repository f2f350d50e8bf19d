"""The exported page in a real headless Chromium: loads from file:// and http, reacts, draws true numbers."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from data_js import decode_array, read_data_js

from vitladder.analysis.capture import capture_attention
from vitladder.analysis.checkpoint import load_model, load_run_config
from vitladder.analysis.checkpoint import test_split as run_test_split  # not collected as a test
from vitladder.analysis.probes.positions import grid_correlation, patch_position_embeddings, position_similarity
from vitladder.data.augment import normalize

ALL_MAPS_JS = """() => Array.from(document.querySelectorAll('#maps canvas.map'), (c) =>
    Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data))"""
ONE_MAP_JS = """([sel]) => { const c = document.querySelector(sel);
    return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data); }"""


@pytest.fixture(scope="module")
def data(demo_index: Path) -> dict:
    return read_data_js(demo_index.parent / "data.js")


def rgb(flat: list[int]) -> np.ndarray:
    """getImageData's flat RGBA -> (pixels, 3) RGB, checking every pixel is opaque."""
    pixels = np.asarray(flat, dtype=np.uint8).reshape(-1, 4)
    assert (pixels[:, 3] == 255).all()
    return pixels[:, :3]


def all_maps(page) -> np.ndarray:
    return np.stack([rgb(m) for m in page.evaluate(ALL_MAPS_JS)])  # (L * (H + 1), N, 3)


def pixels_of(page, selector: str) -> np.ndarray:
    return rgb(page.evaluate(ONE_MAP_JS, [selector]))  # (N, 3)


def map_pixels(page, layer: int, col: int) -> np.ndarray:
    return pixels_of(page, f'#maps canvas[data-layer="{layer}"][data-col="{col}"]')


def expected_colours(data: dict, image: int, query: int) -> np.ndarray:
    """What every map should show for a query token (0 = CLS, 1 + p = patch p): the LUT at the bytes."""
    L, C, G = data["layers"], data["heads"] + 1, data["grid"]
    codes = decode_array(data["images"][image]["attn"], "u1", (L, C, G * G + 1, G * G))
    lut = decode_array(data["lut"], "u1", (256, 3))
    return lut[codes[:, :, query].reshape(L * C, G * G)]  # (L * C, N, 3)


def state(page) -> dict:
    return page.eval_on_selector(
        "#maps", "el => ({image: +el.dataset.image, patch: +el.dataset.patch, mode: el.dataset.mode})"
    )


def hover(page, grid: int, row: int, col: int) -> None:
    box = page.locator("#image").bounding_box()
    page.mouse.move(box["x"] + (col + 0.5) * box["width"] / grid, box["y"] + (row + 0.5) * box["height"] / grid)


def test_page_loads_from_disk_without_errors(demo_page, data: dict, demo_index: Path) -> None:
    page = demo_page.page
    folder = demo_index.parent.resolve().as_uri()
    names = sorted(url.rsplit("/", 1)[1] for url in demo_page.requests)
    assert names == ["data.js", "demo.css", "demo.js", "index.html"]
    assert all(url.startswith(folder + "/") for url in demo_page.requests)  # nothing from elsewhere
    assert page.title().startswith("patch4:")
    run_line = page.inner_text("#run-line")
    assert "patch4" in run_line and "test accuracy 42.4%" in run_line
    assert page.locator("#thumbs button").count() == len(data["images"])
    assert page.locator("#maps canvas.map").count() == data["layers"] * (data["heads"] + 1)
    assert "scaled to its own maximum" in page.inner_text("#grid-help")
    assert "class" in page.inner_text("#caption")  # true and predicted class of image 1
    start = state(page)
    np.testing.assert_array_equal(all_maps(page), expected_colours(data, 0, start["patch"] + 1))
    assert demo_page.errors == []


def test_hovering_two_patches_changes_the_maps(demo_page, data: dict) -> None:
    page, G = demo_page.page, data["grid"]
    hover(page, G, 0, 0)
    assert state(page)["patch"] == 0
    first = all_maps(page)
    hover(page, G, 5, 6)
    assert state(page)["patch"] == 5 * G + 6
    second = all_maps(page)
    changed = [not np.array_equal(a, b) for a, b in zip(first, second)]
    assert sum(changed) >= len(changed) - 2, "nearly every layer and head should look elsewhere"
    np.testing.assert_array_equal(second, expected_colours(data, 0, 5 * G + 6 + 1))
    assert demo_page.errors == []


def test_a_map_pixel_is_the_models_attention(demo_page, data: dict, demo_run: Path) -> None:
    """Pixel -> byte (through the colour table) -> attention, against the model's own float attention."""
    page, G, H = demo_page.page, data["grid"], data["heads"]
    model, meta = load_model(demo_run)
    images, _, _ = run_test_split(load_run_config(meta))
    _, maps = capture_attention(model, normalize(images[:1], meta.stats.mean, meta.stats.std))
    attn = torch.stack(maps, dim=1)[0]  # (L, H, T, T) of image 0
    attn = torch.cat([attn, attn.mean(dim=1, keepdim=True)], dim=1).numpy()  # + the head mean
    lut = decode_array(data["lut"], "u1", (256, 3)).astype(int)
    row, col = 2, 3
    hover(page, G, row, col)
    query = 1 + row * G + col
    for layer, head in [(0, 0), (1, 4), (6, 2), (3, H)]:  # H: the mean column
        pixels = map_pixels(page, layer, head).astype(int)  # (N, 3)
        codes = np.abs(pixels[:, None, :] - lut[None]).sum(-1).argmin(-1)  # nearest colour's byte
        truth = attn[layer, head, query, 1:]
        values = codes / 255 * truth.max()
        assert np.abs(values - truth).max() <= 1.5 * truth.max() / 255, (layer, head)
    assert demo_page.errors == []


def test_the_position_map_is_the_hovered_patchs_similarity(demo_page, data: dict, demo_run: Path) -> None:
    """Pixels -> the bytes of data.js (through the colour table) -> the cosine similarity of the model's own
    position embeddings, within half a step of the fixed [-1, 1] scale; the patch itself is the one 1."""
    page, G = demo_page.page, data["grid"]
    N = G * G
    model, _ = load_model(demo_run)
    truth = position_similarity(patch_position_embeddings(model))  # (N, N)
    lut = decode_array(data["lut"], "u1", (256, 3))
    codes = decode_array(data["position"]["similarity"], "u1", (N, N))
    caption = page.inner_text("#position-caption")
    drawn = []
    for row, col in [(0, 0), (5, 6), (2, 3)]:
        patch = row * G + col
        hover(page, G, row, col)
        assert page.get_attribute("#position", "data-patch") == str(patch)
        pixels = pixels_of(page, "#position")  # (N, 3)
        np.testing.assert_array_equal(pixels, lut[codes[patch]])
        values = -1 + codes[patch] / 255 * 2  # (N,)
        assert np.abs(values - truth[patch].numpy()).max() <= 1 / 255 + 1e-6
        assert values.argmax() == patch and values[patch] == 1.0 and (np.delete(values, patch) < 1).all()
        assert (pixels[patch] == lut[255]).all() and (np.delete(pixels, patch, axis=0) != lut[255]).any(axis=1).all()
        drawn.append(pixels)
    assert not np.array_equal(drawn[0], drawn[1]) and not np.array_equal(drawn[1], drawn[2])
    # The model's one number, once, in the caption, which hovering leaves alone.
    rho = grid_correlation(truth, G)
    assert data["position"]["grid_correlation"] == pytest.approx(rho)
    assert f"{rho:+.2f} (strongly negative: grid-like" in caption and page.inner_text("#position-caption") == caption
    assert page.inner_text("body").count("Spearman") == 1
    # Pointing at a cell of the map reads its value.
    box = page.locator("#position").bounding_box()
    page.mouse.move(box["x"] + 6.5 * box["width"] / G, box["y"] + 1.5 * box["height"] / G)
    value = -1 + codes[2 * G + 3, 1 * G + 6] / 255 * 2
    info = page.inner_text("#map-info")
    assert f"patch (row 2, column 3) and patch (row 1, column 6) have cosine similarity {value:.2f}" in info
    assert demo_page.errors == []


def test_arrow_keys_move_the_pinned_patch(demo_page, data: dict) -> None:
    page, G = demo_page.page, data["grid"]
    page.focus("#image")
    start = state(page)["patch"]
    page.keyboard.press("ArrowRight")
    assert state(page)["patch"] == start + 1
    page.keyboard.press("ArrowDown")
    assert state(page)["patch"] == start + 1 + G
    np.testing.assert_array_equal(all_maps(page), expected_colours(data, 0, start + 1 + G + 1))
    for _ in range(G):
        page.keyboard.press("ArrowUp")
    assert state(page)["patch"] == (start + 1) % G  # stops at the top row
    assert demo_page.errors == []


def test_the_cls_switch_shows_the_cls_tokens_maps(demo_page, data: dict) -> None:
    page = demo_page.page
    patch_maps = all_maps(page)
    page.click("#mode-cls")
    assert state(page)["mode"] == "cls"
    cls_maps = all_maps(page)
    assert not np.array_equal(patch_maps, cls_maps)
    np.testing.assert_array_equal(cls_maps, expected_colours(data, 0, 0))
    assert page.get_attribute("#mode-cls", "aria-checked") == "true"
    assert not page.locator("#maps .marker").first.is_visible()  # no query patch to mark
    page.keyboard.press("c")
    assert state(page)["mode"] == "patch"
    np.testing.assert_array_equal(all_maps(page), patch_maps)
    assert demo_page.errors == []


def test_choosing_an_image_redraws_everything(demo_page, data: dict) -> None:
    page, G = demo_page.page, data["grid"]
    patch = state(page)["patch"]
    page.click("#thumbs button >> nth=2")
    assert state(page) == {"image": 2, "patch": patch, "mode": "patch"}
    meta = data["images"][2]
    assert f"true: {data['classes'][meta['label']]}" in page.inner_text("#caption")
    assert f"predicted: {data['classes'][meta['pred']]}" in page.inner_text("#caption")
    np.testing.assert_array_equal(all_maps(page), expected_colours(data, 2, patch + 1))
    lut = decode_array(data["lut"], "u1", (256, 3))
    rollout = lut[decode_array(meta["rollout"], "u1", (G * G,))]
    np.testing.assert_array_equal(pixels_of(page, "#rollout"), rollout)
    page.keyboard.press("n")
    assert state(page)["image"] == 3
    assert demo_page.errors == []


def test_a_click_pins_the_patch_against_hovering(demo_page, data: dict) -> None:
    page, G = demo_page.page, data["grid"]
    hover(page, G, 1, 1)
    page.mouse.down()
    page.mouse.up()
    hover(page, G, 6, 6)
    assert state(page)["patch"] == G + 1  # pinned: the pointer can travel to the maps
    hover(page, G, 1, 1)
    page.mouse.down()
    page.mouse.up()  # a second click on it unpins
    hover(page, G, 6, 6)
    assert state(page)["patch"] == 6 * G + 6
    assert demo_page.errors == []


def test_a_redraw_fits_in_a_frame(demo_page) -> None:
    """Median time for a key press to redraw all maps and the image, measured inside the page."""
    median_ms = demo_page.page.evaluate("""() => {
        const times = [];
        for (let i = 0; i < 40; i++) {
            const key = i % 2 ? 'ArrowLeft' : 'ArrowRight';
            const t0 = performance.now();
            document.dispatchEvent(new KeyboardEvent('keydown', {key, bubbles: true}));
            times.push(performance.now() - t0);
        }
        times.sort((a, b) => a - b);
        return times[20];
    }""")
    assert median_ms < 16, f"a redraw took {median_ms:.1f} ms"


def test_the_page_works_from_a_static_http_server(browser, page_opener, demo_index: Path) -> None:
    handler = functools.partial(_QuietHandler, directory=str(demo_index.parent))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        origin = f"http://127.0.0.1:{server.server_address[1]}"
        opened = page_opener(browser, f"{origin}/index.html")
        assert "test accuracy" in opened.page.inner_text("#run-line")
        assert len(opened.requests) == 4 and all(url.startswith(origin + "/") for url in opened.requests)
        assert opened.errors == []
        opened.page.close()
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass


def test_screenshot(demo_page, data: dict, demo_index: Path) -> None:
    """Saves <demo>/screenshot.png with a patch pinned and one map under the pointer."""
    page, G = demo_page.page, data["grid"]
    hover(page, G, 3, 2)
    page.hover('#maps canvas[data-layer="1"][data-col="2"]')
    path = demo_index.parent / "screenshot.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    assert "Layer 1, head 2" in page.inner_text("#map-info")
    assert demo_page.errors == []
