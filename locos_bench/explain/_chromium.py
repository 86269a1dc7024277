"""A minimal headless Chromium driver over the DevTools protocol on a pipe (no extra packages).

Chromium started with `--remote-debugging-pipe` reads protocol messages from fd 3 and writes
replies to fd 4, each a JSON object ended by a NUL byte. That is all the explain page's
browser test and its screenshot need: open a file, evaluate JavaScript, click at a point,
capture a PNG. Private: used by tests and `scripts/explain_screenshot.py`.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
)
BINARIES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """Path of a Chromium binary on PATH (Debian's `chromium` first), or None."""
    for name in BINARIES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, binary: str | None = None, *, width: int = 1400, height: int = 1000, timeout: float = 60.0) -> None:
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise LocosError(f"no Chromium found on PATH (looked for {', '.join(BINARIES)})")
        self.width, self.height, self.timeout = width, height, timeout
        self._next_id = 0
        self._buffer = b""
        self.session: str | None = None

    def __enter__(self) -> Chromium:
        self._profile = tempfile.TemporaryDirectory(prefix="locos-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        top_fd = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024

        def wire() -> None:  # in the child: the protocol pipes become fds 3 and 4, nothing else leaks
            r, w = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(r, 3)
            os.dup2(w, 4)
            os.closerange(5, top_fd)

        args = [self.binary, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
                f"--window-size={self.width},{self.height}", "about:blank"]
        # close_fds would run after `wire` and close fds 3 and 4 again; `wire` closes the rest.
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, preexec_fn=wire, close_fds=False)
        os.close(to_child_r)
        os.close(from_child_w)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # already gone
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        self._profile.cleanup()

    # -- protocol ----------------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply (events in between are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise LocosError(f"Chromium: {method} failed: {reply['error'].get('message')}")
                return reply.get("result", {})

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or self._proc.poll() is not None:
                raise LocosError("Chromium did not answer (timed out or exited)")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise LocosError("Chromium closed its DevTools pipe")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    # -- page --------------------------------------------------------------------------------

    def open(self, path: Path | str, *, ready: str = "document.readyState === 'complete'") -> None:
        """Open a local file in a fresh page and wait until the JS condition `ready` holds."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.page("Page.enable")
        self.page("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        self.page("Page.navigate", {"url": Path(path).resolve().as_uri()})
        deadline = time.monotonic() + self.timeout
        while not self.evaluate(f"!!({ready})"):
            if time.monotonic() > deadline:
                raise LocosError(f"page {path} never became ready ({ready})")
            time.sleep(0.05)

    def page(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.call(method, params, session=self.session)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = self.page("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise LocosError(f"JavaScript error: {result['exceptionDetails'].get('text')} in {expression[:80]!r}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (pressed, released) at the centre of the first match of `selector`."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise LocosError(f"nothing matches {selector!r}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent",
                      {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def screenshot(self, path: Path | str) -> Path:
        """Save a PNG of the viewport."""
        data = self.page("Page.captureScreenshot", {"format": "png"})["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path
