"""W&B online against a server that does not start the run (none, or one that fails over HTTP): offline with one
warning line, soon; a bad mode: one line."""

from __future__ import annotations

import json
import socket
import threading
import warnings
from pathlib import Path

import pytest

from vitladder.errors import UserError
from vitladder.pipeline import train_rung
from vitladder.wandb.run import INIT_TIMEOUT_S, resolve_mode, start_run


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
    "answer",
    [
        None,  # nothing listens
        b"\x00\x17garbage, not HTTP at all\r\n\r\n",
        http("500 Internal Server Error", "oops"),
        http("401 Unauthorized", {"errors": ["bad key"]}),
        http("200 OK", "<html>captive portal</html>"),
    ],
    ids=["nothing-listens", "not-http", "http-500", "http-401", "captive-portal"],
)
def test_online_falls_back_to_offline_when_the_server_does_not_start_the_run(fresh_wandb, tmp_path, answer):
    url, close = serve(answer) if answer else ("http://127.0.0.1:9", lambda: None)  # 9: the discard port, closed
    fresh_wandb.setenv("WANDB_BASE_URL", url)
    fresh_wandb.setenv("WANDB_API_KEY", "x" * 40)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = start_run("online", project="vitladder-tests", dir=str(tmp_path))
        run.finish()
    finally:
        close()
    ours = [str(w.message) for w in caught if "W&B could not start the run online (" in str(w.message)]
    assert len(ours) == 1 and ours[0].endswith("logging offline instead; upload later with `wandb sync`"), ours
    assert run.offline and list((tmp_path / "wandb").glob(f"offline-run-*-{run.id}"))


def test_auto_with_a_key_wandb_cannot_use_falls_back_to_offline_too(fresh_wandb, tmp_path):
    fresh_wandb.setenv("WANDB_API_KEY", "abc")  # W&B's keys have 40 characters or more
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = start_run(resolve_mode("auto"), project="vitladder-tests", dir=str(tmp_path))
    run.finish()
    (warning,) = [str(w.message) for w in caught if "W&B could not start the run online (" in str(w.message)]
    assert "WANDB_API_KEY" in warning and run.offline


def test_online_asks_wandb_itself_with_a_short_init_timeout(monkeypatch):
    """W&B waits 90 s for a server by default; the project gives it INIT_TIMEOUT_S, unless WANDB_INIT_TIMEOUT
    (W&B's own variable; the tests' conftest sets 1 s) says otherwise."""
    import wandb

    calls = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: calls.append(kwargs) or "the run")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        assert start_run("online", project="p") == "the run"
    assert calls[-1]["mode"] == "online" and calls[-1]["settings"].init_timeout == 1.0
    monkeypatch.delenv("WANDB_INIT_TIMEOUT")
    start_run("online", project="p")
    assert calls[-1]["settings"].init_timeout == INIT_TIMEOUT_S < wandb.Settings().init_timeout
    start_run("offline", project="p")
    assert calls[-1] == {"mode": "offline", "project": "p"}


def test_a_bogus_wandb_mode_in_the_environment_is_one_line_before_anything_is_written(tiny_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "bogus")
    cfg = tiny_cfg("patch8")
    with pytest.raises(UserError) as error:
        train_rung(cfg)
    assert str(error.value) == "WANDB_MODE='bogus' is not a W&B mode: use one of auto, online, offline, disabled"
    assert not Path(cfg.output_root, "smoke").exists()
