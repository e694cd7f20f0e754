"""The compose deployment as scripts/container_test runs it: the compose command, the
verifier containers, and waiting for readiness.

The script passes its setup in the environment (:func:`Stack.from_env`); the command-line
form (``python -m tests.containers.stack wait URL SECONDS [CONTAINER]``) is the script's
readiness probe: it prints the seconds it waited, and gives up early when CONTAINER exits.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx


def wait_ready(url: str, timeout: float, path: str = "/readyz", alive=lambda: True) -> float:
    """Poll ``url + path`` every 0.2 s until it answers 200; returns the seconds waited.
    Raises TimeoutError after ``timeout`` seconds, RuntimeError as soon as ``alive()`` is
    false (the server's container exited)."""
    t0 = time.monotonic()
    while True:
        if not alive():
            raise RuntimeError(f"{url}: the server exited before it was ready")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return time.monotonic() - t0
        except httpx.TransportError:
            pass
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{url}{path} not 200 within {timeout} s")
        time.sleep(0.2)


@dataclass
class Stack:
    """The running deployment.

    Attributes:
        url: nginx, as published on the host.
        compose: the compose command line (``docker-compose -p … -f compose.yaml -f …``).
        docker: the docker command line.
        cuda_url: the CUDA image started alone without a GPU ('' when not started).
        api_key: the admin key scripts/compose_secrets made for the stack (compose.yaml's
            replicas refuse requests without one; the CUDA image started alone has none).
    """

    url: str
    compose: list[str]
    docker: list[str]
    cuda_url: str = ""
    api_key: str = ""

    @classmethod
    def from_env(cls) -> Stack:
        e = os.environ
        return cls(e["ZAPVERIFY_STACK_URL"], shlex.split(e["ZAPVERIFY_STACK_COMPOSE"]),
                   shlex.split(e.get("ZAPVERIFY_STACK_DOCKER", "docker")), e.get("ZAPVERIFY_STACK_CUDA_URL", ""),
                   e.get("ZAPVERIFY_STACK_API_KEY", ""))

    @property
    def auth(self) -> dict[str, str]:
        """The headers that carry :attr:`api_key`."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def run(self, *args: str, timeout: float = 300) -> str:
        """A compose subcommand; its stdout.  Raises CalledProcessError with its output."""
        return subprocess.run([*self.compose, *args], check=True, capture_output=True, text=True,
                              timeout=timeout).stdout

    def docker_run(self, *args: str, timeout: float = 120) -> str:
        return subprocess.run([*self.docker, *args], check=True, capture_output=True, text=True,
                              timeout=timeout).stdout

    def containers(self, service: str) -> list[str]:
        """Ids of the running containers of ``service``."""
        return self.run("ps", "-q", service).split()

    def inspect(self, container: str) -> dict:
        return json.loads(self.docker_run("inspect", container))[0]

    def replica_of(self, instance: str) -> str:
        """The container hostname in an ``X-Zapverify-Instance`` value (``<hostname>-<pid>``;
        compose.yaml sets no instance name, so a replica's uvicorn workers share the hostname)."""
        return instance.rsplit("-", 1)[0]

    def wait_healthy(self, service: str, count: int, timeout: float) -> float:
        """Wait until ``count`` containers of ``service`` report healthy; seconds waited."""
        t0 = time.monotonic()
        while True:
            ids = self.containers(service)
            states = [self.inspect(c)["State"].get("Health", {}).get("Status") for c in ids]
            if len(ids) >= count and states.count("healthy") >= count:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"{service}: {states} after {timeout} s")
            time.sleep(0.5)


def container_running(docker: list[str], container: str) -> bool:
    out = subprocess.run([*docker, "inspect", "-f", "{{.State.Running}}", container], capture_output=True, text=True)
    return out.stdout.strip() == "true"


def main(argv: list[str]) -> int:
    if len(argv) in (3, 4) and argv[0] == "wait":
        alive = (lambda: container_running(shlex.split(os.environ.get("ZAPVERIFY_STACK_DOCKER", "docker")), argv[3])) \
            if len(argv) == 4 else (lambda: True)
        try:
            print(f"{wait_ready(argv[1], float(argv[2]), alive=alive):.1f}")
        except (TimeoutError, RuntimeError) as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    print("usage: python -m tests.containers.stack wait URL SECONDS [CONTAINER]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
