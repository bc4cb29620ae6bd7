"""How Treadle drives a browser (benchmarks and the Canvas's tests): Debian's Chromium,
headless, never a browser build downloaded by a tool, no background networking."""

CHROMIUM_PATH = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
