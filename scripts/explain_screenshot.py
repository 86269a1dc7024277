"""Screenshot an explain page in headless Chromium: `python scripts/explain_screenshot.py PAGE PNG`.

Made the README's docs/explain.png from the page of
`locos-bench explain --model gemma3 --task kv-retrieval --index 0 --output explain.html`.
"""

from __future__ import annotations

import sys

from locos_bench.explain._chromium import Chromium


def main(page: str, png: str, width: int = 1400, height: int = 900) -> None:
    with Chromium(width=width, height=height) as browser:
        browser.open(page, ready="document.body && document.body.dataset.ready === '1'")
        browser.screenshot(png)
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[0])
    main(sys.argv[1], sys.argv[2])
