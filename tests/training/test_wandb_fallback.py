"""W&B online against a server that accepts TCP but fails over HTTP: offline with a warning; a bad mode: one line."""

from __future__ import annotations

import json
import socket
import threading
import warnings
from pathlib import Path

import pytest

from vitladder.errors import UserError
from vitladder.pipeline import train_rung
from vitladder.training.wandb_run import resolve_mode


def serve(answer: bytes) -> tuple[str, callable]:
    """A TCP server on 127.0.0.1 that reads a request and writes `answer` (raw bytes) back."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def loop():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            with connection:
                connection.recv(65536)
                connection.sendall(answer)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()

    def close():
        stop.set()
        thread.join()
        server.close()

    return f"http://127.0.0.1:{server.getsockname()[1]}", close


def http(status: str, body: dict | str) -> bytes:
    payload = (json.dumps(body) if isinstance(body, dict) else body).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        f"Connection: close\r\n\r\n"
    ).encode() + payload


@pytest.mark.parametrize(
    "answer, reason",
    [
        (b"\x00\x17garbage, not HTTP at all\r\n\r\n", "unreachable"),
        (http("500 Internal Server Error", "oops"), "answered HTTP 500"),
        (http("401 Unauthorized", {"errors": ["bad key"]}), "rejected the API key (HTTP 401"),
        (http("200 OK", "<html>captive portal</html>"), "answered something other than the W&B API"),
        (http("200 OK", {"data": {"viewer": None}}), "knows no user with this API key"),
    ],
)
def test_online_falls_back_to_offline_when_the_server_answers_wrongly(monkeypatch, answer, reason):
    url, close = serve(answer)
    monkeypatch.setenv("WANDB_BASE_URL", url)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert resolve_mode("online") == "offline"
    finally:
        close()
    messages = [str(w.message) for w in caught]
    assert any(f"W&B server {url} {reason}" in m and "logging offline instead" in m for m in messages), messages


def test_online_stays_online_when_the_server_knows_the_key(monkeypatch):
    url, close = serve(http("200 OK", {"data": {"viewer": {"id": "VXNlcjox"}}}))
    monkeypatch.setenv("WANDB_BASE_URL", url)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback warning either
            assert resolve_mode("online") == "online"
    finally:
        close()


def test_a_bogus_wandb_mode_in_the_environment_is_one_line_before_anything_is_written(tiny_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "bogus")
    cfg = tiny_cfg("patch8")
    with pytest.raises(UserError) as error:
        train_rung(cfg)
    assert str(error.value) == "WANDB_MODE='bogus' is not a W&B mode: use one of auto, online, offline, disabled"
    assert not Path(cfg.output_root, "smoke").exists()
