"""Open a local HTML file in headless Chromium: the DOM after load and the console errors.

Chromium runs as root here, hence --no-sandbox. Every host name resolves to nothing
(--host-resolver-rules), so nothing a page asks for reaches the network; that a page asks for
nothing is checked on its text (no src, href, url(), script).
"""

import html.parser
import os
import re
import shutil
import subprocess
import tempfile

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MISSING = ("chromium is not installed: apt-get install -y chromium (installer/run-tests.sh installs it); "
           "the report tests open the pages in it")
# console messages as Chromium logs them with --enable-logging=stderr: [..:INFO:CONSOLE(n)] or
# [..:INFO:CONSOLE:..(n)] "message", source: url (n)
_CONSOLE = re.compile(r":CONSOLE[^\]]*\]\s*(.*)$")


def load(path, timeout=120):
    """(dom text, [console messages]) of ``path`` opened in Chromium."""
    assert CHROMIUM, MISSING
    with tempfile.TemporaryDirectory(prefix="gml-chromium-") as profile:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--host-resolver-rules=MAP * ~NOTFOUND",
               f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--log-level=0",
               "--virtual-time-budget=2000", "--dump-dom", "file://" + os.path.abspath(path)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    console = [m.group(1) for line in res.stderr.splitlines() for m in [_CONSOLE.search(line)] if m]
    return res.stdout, console


class Elements(html.parser.HTMLParser):
    """Every start tag of a document as (tag, {attribute: value})."""

    def __init__(self, text):
        super().__init__()
        self.items = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.items.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.items.append((tag, dict(attrs)))

    def find(self, tag=None, **attrs):
        return [a for t, a in self.items
                if (tag is None or t == tag) and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]
