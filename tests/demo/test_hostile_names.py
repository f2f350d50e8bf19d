"""Names from the data or a checkpoint (class folders, the rung) are text in the demo, never markup."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

from data_js import read_data_js

from vitladder.demo.export import export_demo, render_data_js

HOSTILE = [
    "</script><script>window.injected = 1</script>",
    "<!--",
    "<b>bold</b>",
    "a&amp;b",
    "price_$",
    "new\nline",
    "\u2028x\u2029",
] + [f"class{i}" for i in range(3)]


class ScriptText(HTMLParser):
    """The text of each <script> element, as a browser's HTML parser would cut it."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.open = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "script":
            self.open = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self.open = self.open and tag != "script"

    def handle_data(self, data: str) -> None:
        if self.open:
            self.scripts[-1] += data


def test_data_js_holds_names_that_cannot_end_a_script() -> None:
    payload = {"format": "vitladder-demo/1", "rung": "</script>", "classes": HOSTILE}
    text = render_data_js(payload)
    assert not set("<>&\u2028\u2029") & set(text)  # all as JSON escapes
    # Even pasted into a page, the data stays one script and reads back the same.
    parser = ScriptText()
    parser.feed(f"<html><body><script>{text}</script><p>after</p></body></html>")
    assert parser.scripts == [text]
    assert text.count("\n") == 2  # the comment line and the data line: no raw line break from a name


def test_data_js_round_trips_hostile_names(tmp_path: Path) -> None:
    payload = {"format": "vitladder-demo/1", "rung": "</script>", "classes": HOSTILE}
    (tmp_path / "data.js").write_text(render_data_js(payload))
    assert read_data_js(tmp_path / "data.js") == payload


def test_demo_js_writes_text_never_markup() -> None:
    source = (resources.files("vitladder.demo") / "static" / "demo.js").read_text()
    code = re.sub(r"//[^\n]*", "", source)  # comments may mention what the code must not do
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in code, sink
    assert "D.classes" in code and "textContent" in code  # names still shown, as text


def test_exported_names_are_the_checkpoints_as_text(make_run, tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", classes=HOSTILE)
    index = export_demo(run, num_images=2)
    text = (index.parent / "data.js").read_text()
    assert "<" not in text and ">" not in text
    assert read_data_js(index.parent / "data.js")["classes"] == HOSTILE


def test_the_page_shows_hostile_names_as_text(browser, page_opener, make_run, tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", classes=HOSTILE)
    opened = page_opener(browser, export_demo(run, num_images=3).resolve().as_uri())
    page = opened.page
    try:
        caption = page.inner_text("#caption")
        shown = [name for name in HOSTILE if name.split("\n")[0] in caption]
        assert shown, caption  # the true class of image 1 is shown, literally
        assert page.locator("#caption b, #caption script").count() == 0  # and not as elements
        assert page.evaluate("() => window.injected") is None
        assert opened.errors == []
    finally:
        page.close()
