"""How long nginx keeps sending requests to a replica's old address after it changes (docs/deployment.md, "Scale-out
on one machine").

docker-compose.yml brought up by the container suite's engine (Podman here), one api replica, nginx in
front. Two ways for the replica's address to change, each repeated `--rounds` times:

* `reconnect`: the running replica is taken off the compose network and put back (alias `api`), so it gets
  a new address while it keeps serving: what nginx does about the old address, with no start-up time
  mixed in;
* `restart`: every replica stopped and started again, as tests/containers/test_stack.py does.

Four client threads send GET /v1/models/astronaut through nginx on new connections (so both nginx
workers answer) every 50 ms. The window is from the change (the reconnect, or the first 200 after the
restart) to the end of the last failed answer; each failure's duration shows nginx's connect timeout.

    python -m bench.stale_address --rounds 3      # needs the images (tests/containers builds them)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from tests.containers.engine import RUNTIME_IMAGE, Engine
from tests.containers.stack import Stack

PATH = "/v1/models/astronaut"


class Probe:
    """Client threads recording (sent, done, status) until stopped."""

    def __init__(self, stack: Stack, threads: int = 4, every_s: float = 0.05):
        self.stack, self.every_s, self.answers, self.stop = stack, every_s, [], threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            code = self.stack.status(PATH)
            self.answers.append((sent, time.monotonic(), code))
            time.sleep(self.every_s)

    def close(self) -> list[tuple[float, float, int]]:
        self.stop.set()
        for t in self.threads:
            t.join(15)
        return sorted(self.answers)


def window(answers, since: float) -> dict:
    """Failed answers sent after `since` and the window from `since` to the end of the last one."""
    bad = [(s, d, c) for s, d, c in answers if s >= since and c != 200]
    return {
        "window_s": round(max(d for _, d, _ in bad) - since, 2) if bad else 0.0,
        "failed": len(bad),
        "answered": sum(1 for s, _, _ in answers if s >= since),
        "failed_durations_s": sorted({round(d - s, 1) for s, d, _ in bad}),
    }


def reconnect(stack: Stack, replica: str) -> dict:
    network = stack.engine.inspect(replica)["NetworkSettings"]["Networks"]
    (net,) = network.keys()
    before = stack.address(replica)
    probe = Probe(stack)
    time.sleep(2.0)
    stack.engine("network", "disconnect", net, replica)
    stack.engine("network", "connect", "--alias", "api", net, replica)
    changed = time.monotonic()
    time.sleep(12.0)
    answers = probe.close()
    return {"from": before, "to": stack.address(replica), **window(answers, changed)}


def restart(stack: Stack) -> dict:
    replicas = stack.containers()
    before = {r: stack.address(r) for r in replicas}
    stack.engine("stop", "-t", "30", *replicas)
    stack.engine("start", *replicas)
    started = time.monotonic()
    probe = Probe(stack)
    deadline = started + 120
    while time.monotonic() < deadline and not any(c == 200 for _, _, c in probe.answers):
        time.sleep(0.05)
    time.sleep(12.0)
    answers = probe.close()
    first_ok = min(d for _, d, c in answers if c == 200)
    return {
        "addresses": {r: [before[r], stack.address(r)] for r in replicas},
        "first_200_s": round(first_ok - started, 2),
        **window(answers, first_ok),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("build/bench/stale_address.json"))
    args = ap.parse_args()
    engine = Engine.find()
    if engine is None or not engine.image_exists(RUNTIME_IMAGE):
        raise SystemExit(
            f"stale_address: needs a container engine and the image {RUNTIME_IMAGE} "
            "(run tests/containers once to build it)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(engine, Path(tmp), "stale")
        try:
            stack.up(1)
            (replica,) = stack.containers()
            results = {
                "reconnect": [reconnect(stack, replica) for _ in range(args.rounds)],
                "restart": [restart(stack) for _ in range(args.rounds)],
            }
        finally:
            stack.down()
    for kind, rounds in list(results.items()):
        results[f"{kind}_median_window_s"] = statistics.median(r["window_s"] for r in rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
