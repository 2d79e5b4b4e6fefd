#!/usr/bin/env python3
"""check_flipbook.py -- the flipbook (index.html written by hh-demo / hh-viz) in
headless Chromium, driven over the DevTools protocol on a pipe (one browser
start, no network, no display; works as root with --no-sandbox).

  check_flipbook.py [--browser chromium] [--shots DIR] [--first 5] [--second 17] INDEX.html

Checks, in one page session:
  1. a page with a broken script is caught (the console check is not blind);
  2. INDEX.html#frame=FIRST loads with no console error, no uncaught exception
     and no failed resource (a missing frame picture counts); the page shows
     FIRST (body data-frame, the frame picture's src, its numbers table) and
     the picture has loaded; screenshot DIR/frame_FIRST.png;
  3. keyboard navigation: ArrowRight shows the next frame, ArrowLeft the one
     before it again;
  4. INDEX.html#frame=SECOND shows SECOND; screenshot DIR/frame_SECOND.png;
     the two screenshots differ.
Exit 0 when all hold; otherwise one line per failure and exit 1.
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

TIMEOUT = 20.0          # seconds for any one wait


class Browser:
    """Chromium with --remote-debugging-pipe: we write to its fd 3, read its fd 4."""

    def __init__(self, exe, profile):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def child_fds():              # runs in the child before exec; fds 3 and 4 are kept open
            r, w = os.dup(to_r), os.dup(from_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--allow-file-access-from-files", "--hide-scrollbars", "--remote-debugging-pipe",
                "--user-data-dir=" + profile, "--window-size=1280,1000", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(profile, "chromium.log"), "wb"),
                                     pass_fds=(3, 4), preexec_fn=child_fds)
        os.close(to_r)
        os.close(from_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def send(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        want = self.next_id
        while True:
            m = self.read(TIMEOUT)
            if m.get("id") == want:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error'].get('message')}")
                return m.get("result", {})

    def read(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from chromium")
            import select
            r, _, _ = select.select([self.from_r], [], [], max(0.0, deadline - time.monotonic()))
            if r:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe (see chromium.log)")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        m = json.loads(raw)
        if "method" in m:
            self.events.append(m)
        return m

    def wait_event(self, name, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == name:
                    return self.events.pop(i)
            self.read(max(0.01, deadline - time.monotonic()))

    def pump(self, seconds):
        """Collects events for a while (console messages arrive asynchronously)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self.read(deadline - time.monotonic())
            except TimeoutError:
                break

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluating {expr!r}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def close(self):
        try:
            self.send("Browser.close", session=False)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def problems(events):
    """Console errors, uncaught exceptions and failed loads among the events."""
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append("uncaught exception: " + (d.get("exception", {}).get("description") or d.get("text", "?")))
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description", "")))
                                                                 for a in p.get("args", [])))
        elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            en = p["entry"]
            out.append("log error: " + en.get("text", "") + (" " + en["url"] if en.get("url") else ""))
        elif e["method"] == "Network.loadingFailed":
            out.append("load failed: " + p.get("errorText", "?"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("index")
    ap.add_argument("--browser", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--shots", default=None, help="where the screenshots go (default: beside INDEX)")
    ap.add_argument("--first", type=int, default=5)
    ap.add_argument("--second", type=int, default=17)
    a = ap.parse_args()
    index = os.path.abspath(a.index)
    shots = os.path.abspath(a.shots or os.path.dirname(index))
    os.makedirs(shots, exist_ok=True)
    fails = []
    profile = tempfile.mkdtemp(prefix="hh-flipbook-")
    b = Browser(a.browser, profile)
    try:
        targets = b.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        b.session = b.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                           session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.send(domain + ".enable")
        b.send("Emulation.setDeviceMetricsOverride",
               {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})

        def load(url):
            b.events.clear()
            b.send("Page.navigate", {"url": url})
            b.wait_event("Page.loadEventFired")
            b.pump(0.3)

        def shown():
            return b.eval("[document.body.dataset.frame, document.getElementById('frame').getAttribute('src'),"
                          " document.getElementById('frame').complete && document.getElementById('frame').naturalWidth > 0,"
                          " document.getElementById('nums').textContent, document.getElementById('cur').textContent]")

        def expect_frame(n, how):
            deadline = time.monotonic() + TIMEOUT
            while True:
                frame, src, loaded, nums, cur = shown()
                ok = (frame == str(n) and src == "frames/frame_%06d.png" % n and loaded
                      and "fragmentation (largest free)" in nums and cur == "frame %d" % n)
                if ok or time.monotonic() > deadline:
                    break
                b.pump(0.05)
            if not ok:
                fails.append(f"{how}: the page shows frame {frame} (picture {src}, loaded {loaded}, "
                             f"caption {cur!r}), not frame {n}")
            return ok

        def screenshot(n):
            data = base64.b64decode(b.send("Page.captureScreenshot", {"format": "png"})["data"])
            path = os.path.join(shots, "frame_%d.png" % n)
            with open(path, "wb") as f:
                f.write(data)
            return path, data

        # 1. the console check sees a broken script
        load("data:text/html,<body><script>no_such_function_hh()</script></body>")
        if not any("no_such_function_hh" in p for p in problems(b.events)):
            fails.append("a page with a broken script showed no console error: the console check is blind")

        # 2. the first frame, by URL
        base = "file://" + index
        load(base + "#frame=%d" % a.first)
        fails += [f"#frame={a.first}: {p}" for p in problems(b.events)]
        b.events.clear()
        expect_frame(a.first, f"#frame={a.first}")
        shot1, png1 = screenshot(a.first)

        # 3. keyboard navigation
        def key(name, code):
            for t in ("keyDown", "keyUp"):
                b.send("Input.dispatchKeyEvent", {"type": t, "key": name, "code": name,
                                                  "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code})
        key("ArrowRight", 39)
        expect_frame(a.first + 1, "ArrowRight")
        key("ArrowLeft", 37)
        expect_frame(a.first, "ArrowLeft")
        b.pump(0.1)
        fails += [f"arrow keys: {p}" for p in problems(b.events)]
        hash_now = b.eval("location.hash")
        if hash_now != "#frame=%d" % a.first:
            fails.append(f"after navigating back the URL says {hash_now}, not #frame={a.first}")

        # 4. the second frame, by URL (a fresh load: the script reads the hash at start)
        load("about:blank")
        load(base + "#frame=%d" % a.second)
        fails += [f"#frame={a.second}: {p}" for p in problems(b.events)]
        expect_frame(a.second, f"#frame={a.second}")
        shot2, png2 = screenshot(a.second)
        if png1 == png2:
            fails.append(f"the screenshots of frames {a.first} and {a.second} are identical")
        for p in (shot1, shot2):
            if os.path.getsize(p) < 10000:
                fails.append(f"{p}: a {os.path.getsize(p)}-byte screenshot (blank page?)")
    except Exception as e:        # a protocol failure or timeout: say which, with the browser's log
        fails.append(f"{type(e).__name__}: {e}")
        try:
            with open(os.path.join(profile, "chromium.log"), errors="replace") as f:
                fails.append("chromium.log: " + " | ".join(f.read().splitlines()[-5:]))
        except OSError:
            pass
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)
    for f in fails:
        print("  FAIL: " + f)
    if fails:
        return 1
    print(f"  flipbook: frames {a.first} and {a.second} shown by URL, ArrowRight/ArrowLeft move one frame, "
          f"no console error; screenshots {shot1}, {shot2}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
