"""Container health check: exit 0 when an HTTP endpoint answers 200, else 1.

Used by the images' HEALTHCHECK and by docker-compose.yml. Standard library only, so the same file
also runs under the Triton image's Python (3.10).

    python healthcheck.py [URL]

URL defaults to $TENGEN_HEALTHCHECK_URL, else the trainer's http://127.0.0.1:8071/healthz.
"""
from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8071/healthz"
TIMEOUT_S = 4.0


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else os.environ.get("TENGEN_HEALTHCHECK_URL") or DEFAULT_URL
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except (OSError, ValueError) as error:
        print(f"unhealthy: {url}: {error}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"unhealthy: {url} answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
