"""Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4): no driver, no network.

    with Browser.start(tmp) as b:
        page = b.open(path.as_uri())     # waits for the load event; console errors are collected
        page.eval("document.title")
        page.click("a.to-report")        # a real click at the element's centre; waits for the next page
        page.screenshot(out_png)

Chromium is Debian's (``make test`` installs it when missing): found on PATH or at /usr/bin/chromium.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


class BrowserError(RuntimeError):
    pass


@dataclass
class Page:
    browser: Browser
    session: str
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, failed loads

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session)

    def navigate(self, url: str) -> None:
        self.browser.loaded.discard(self.session)
        self.send("Page.navigate", url=url)
        self.wait_loaded()

    def wait_loaded(self, timeout: float = 30) -> None:
        self.browser.pump(lambda: self.session in self.browser.loaded, timeout)

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression!r}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def click(self, selector: str) -> None:
        """A mouse click (press and release) at the centre of the first element matching ``selector``,
        then wait for the page it opens."""
        box = self.eval(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: "center"}});
            const r = e.getClientRects()[0];  // a link wrapped over lines: its first line box
            return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
        if box is None:
            raise BrowserError(f"no element matches {selector!r}")
        self.browser.loaded.discard(self.session)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
        self.wait_loaded()

    def screenshot(self, path: Path, width: int = 1280) -> None:
        height = int(self.eval("document.documentElement.scrollHeight") or 800)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))


class Browser:
    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc, self.w, self.r = proc, to_browser, from_browser
        self.next_id, self.buf = 0, b""
        self.loaded: set[str] = set()
        self.pages: dict[str, Page] = {}

    @classmethod
    @contextlib.contextmanager
    def start(cls, profile: Path, chromium: str | None = None) -> Iterator[Browser]:
        exe = chromium or find_chromium()
        if exe is None:
            raise BrowserError("no chromium: make test installs Debian's (apt-get install chromium)")
        to_r, to_w = os.pipe()  # we write, the browser reads on fd 3
        from_r, from_w = os.pipe()  # the browser writes on fd 4, we read

        def fds() -> None:
            a, b = os.dup(to_r), os.dup(from_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, pass_fds=(3, 4), close_fds=True)  # the child dup2s the pipes onto fds 3 and 4
        os.close(to_r)
        os.close(from_w)
        browser = cls(proc, to_w, from_r)
        try:
            yield browser
        finally:
            with contextlib.suppress(Exception):
                browser.send("Browser.close", {}, timeout=5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()  # only the process this browser started, by its pid
                proc.wait()
            os.close(to_w)
            os.close(from_r)

    def _read(self, timeout: float) -> dict[str, Any]:
        import select

        deadline = time.monotonic() + timeout
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise BrowserError("chromium did not answer in time")
            chunk = os.read(self.r, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed the protocol pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        out: dict[str, Any] = json.loads(msg)
        return out

    def _event(self, msg: dict[str, Any]) -> None:
        page = self.pages.get(msg.get("sessionId", ""))
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Page.loadEventFired" and page is not None:
            self.loaded.add(page.session)
        if page is None:
            return
        if method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            page.errors.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            said = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            page.errors.append(f"console: {said}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            page.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}".strip())

    def pump(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self._event(self._read(max(0.01, deadline - time.monotonic())))

    def send(self, method: str, params: dict[str, Any], session: str | None = None,
             timeout: float = 30) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(max(0.01, deadline - time.monotonic()))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._event(reply)

    def open(self, url: str) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        self.pages[session] = page
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        page.send("Emulation.setDeviceMetricsOverride", width=1280, height=1000, deviceScaleFactor=1, mobile=False)
        page.navigate(url)
        return page
