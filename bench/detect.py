"""What `fdlenv detect --json` costs beyond starting Python (not a test).

Runs `python -m fdlenv detect --json` and `python -c pass` interleaved, so
machine noise hits both alike, and prints the medians and their difference.
On a box with no GPU the difference is fdlenv's own cost (budget: 50 ms).

    python bench/detect.py [N]      (default N=30)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

DETECT = [sys.executable, "-m", "fdlenv", "detect", "--json"]
BARE = [sys.executable, "-c", "pass"]


def once(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    once(DETECT)  # warm the page cache and __pycache__
    detect, bare = [], []
    for _ in range(n):
        detect.append(once(DETECT))
        bare.append(once(BARE))
    d, b = statistics.median(detect), statistics.median(bare)
    print(f"runs: {n} each, interleaved")
    print(f"fdlenv detect --json  median {d * 1000:7.1f} ms")
    print(f"python -c pass        median {b * 1000:7.1f} ms")
    print(f"difference                   {(d - b) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
