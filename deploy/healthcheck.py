"""Container health check: exit 0 when the service answers 200 on /health/ready.

Slim images have no curl, so Docker's HEALTHCHECK and Kubernetes exec probes run this
file with the image's Python (tests/containers runs it in the real image).
The port comes from INR_PORT (the same variable the service reads), default 8000.
Standard library only: it must work before and without the service's packages.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    port = os.environ.get("INR_PORT", "8000")
    url = f"http://127.0.0.1:{port}/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            status = resp.status
    except urllib.error.HTTPError as e:  # 503 while models load
        status = e.code
    except (urllib.error.URLError, OSError) as e:
        sys.stderr.write(f"unhealthy: {url}: {e}\n")
        return 1
    if status != 200:
        sys.stderr.write(f"unhealthy: {url} answered {status}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
