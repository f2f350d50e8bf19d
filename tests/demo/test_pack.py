"""Quantisation and the data.js round trip."""

from __future__ import annotations

import numpy as np
import torch
from data_js import decode_array, dequantise_range, dequantise_rows, read_data_js

from vitladder.demo.export import colormap_lut, encode_array, quantise_range, quantise_rows, render_data_js


def test_quantise_rows_scales_each_row_to_its_maximum() -> None:
    rows = torch.tensor([[0.1, 0.4, 0.2], [0.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    codes, scale = quantise_rows(rows)
    assert codes.dtype == torch.uint8 and codes.shape == rows.shape
    assert scale.tolist() == torch.tensor([0.4, 0.0, 0.5]).tolist()
    assert codes.tolist() == [[64, 255, 128], [0, 0, 0], [255, 255, 0]]  # 0.1/0.4*255 = 63.75 -> 64


def test_round_trip_is_within_half_a_step() -> None:
    torch.manual_seed(0)
    attn = torch.rand(2, 3, 17, 17).softmax(dim=-1) ** 3  # peaked rows of many sizes
    codes, scale = quantise_rows(attn)
    back = dequantise_rows(codes, scale)
    step = scale.unsqueeze(-1) / 255
    assert ((back - attn).abs() <= step / 2 + 1e-7).all()
    assert (codes.amax(dim=-1) == 255).all()


def test_quantise_range_puts_a_fixed_scale_on_the_bytes() -> None:
    values = torch.tensor([-1.0, -0.5, 0.25, 1.0, 1.0000001, -3.0])  # outside the range: clamped
    codes = quantise_range(values, -1.0, 1.0)
    assert codes.dtype == torch.uint8 and codes.tolist() == [0, 64, 159, 255, 255, 0]  # (v + 1) / 2 * 255, rounded
    similarity = torch.rand(64, 64) * 2 - 1
    back = dequantise_range(quantise_range(similarity, -1.0, 1.0), -1.0, 1.0)
    assert ((back - similarity).abs() <= 1 / 255 + 1e-6).all()  # half of a step of 2 / 255


def test_arrays_survive_base64_in_data_js(tmp_path) -> None:
    codes = (np.arange(300) % 256).astype(np.uint8).reshape(3, 100)
    scale = np.array([0.5, 1e-3, 3.25], dtype=np.float32)
    path = tmp_path / "data.js"
    path.write_text(
        render_data_js(
            {"format": "x", "codes": encode_array(codes, "u1"), "scale": encode_array(torch.from_numpy(scale), "f4")}
        )
    )
    text = path.read_text()
    assert text.splitlines()[1].startswith("window.VITLADDER_DEMO = {")
    payload = read_data_js(path)
    assert (decode_array(payload["codes"], "u1", (3, 100)) == codes).all()
    assert (decode_array(payload["scale"], "f4") == scale).all()


def test_colormap_lut_runs_dark_to_bright() -> None:
    lut = colormap_lut()
    assert lut.shape == (256, 3) and lut.dtype == np.uint8
    assert len({tuple(c) for c in lut}) > 250  # nearly every byte has its own colour
    luminance = lut.astype(float) @ [0.2126, 0.7152, 0.0722]
    assert (np.diff(luminance) >= -1).all() and luminance[-1] - luminance[0] > 150  # brighter = more
