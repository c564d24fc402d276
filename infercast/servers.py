"""Start the real servers (Prometheus, Alertmanager, Redis) on loopback ports, for tests and the local stack.

They come from Debian's packages (`scripts/install.sh` installs them).  Each helper starts the binary in a
temporary directory, waits until it answers, and stops it on `close()` (or at the end of a `with` block).

Two failures, kept apart on purpose: `ServerUnavailable` means the binary is not installed (a machine without the
Debian packages: tests may skip, and the test run then says which); `ServerFailed` means the binary ran and the
server exited or never answered -- most often a bad config we generated, which is our bug and must fail a test,
never turn into a skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests


class ServerUnavailable(RuntimeError):
    """The binary is not installed (nothing was started)."""


class ServerFailed(RuntimeError):
    """The server started but exited (e.g. on a bad config) or did not answer; the message carries its log."""


CLAIM_SECONDS = 900.0  # a claimed port is not handed out again for this long (then the claim is stale)


def _claims() -> Path:
    d = Path(tempfile.gettempdir()) / f"infercast-ports-{os.getuid()}"
    d.mkdir(exist_ok=True)
    return d


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port() -> int:
    """A loopback port nothing listens on, claimed for this user's infercast processes for 15 minutes.

    The kernel's bind(0) only says the port is free now: between closing the probe and the server binding it,
    another infercast process on the machine (a second test run, another pytest-xdist worker) may be handed the same
    port, and its readiness probe would then talk to our server.  A claim file per port (created O_EXCL under the
    temporary directory) keeps them apart; a claim older than `CLAIM_SECONDS` is stale and taken over."""
    claims = _claims()
    for _ in range(200):
        port = _kernel_port()
        claim = claims / str(port)
        try:
            if time.time() - claim.stat().st_mtime > CLAIM_SECONDS:
                claim.unlink(missing_ok=True)
        except OSError:
            pass  # no claim yet
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            continue  # another process holds this one
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return port
    raise ServerFailed(f"no free loopback port: 200 ports offered by the kernel are all claimed under {claims}")


def which(*names: str) -> str:
    for n in names:
        p = shutil.which(n) or (f"/usr/bin/{n}" if os.path.exists(f"/usr/bin/{n}") else None)
        if p:
            return p
    raise ServerUnavailable(f"none of {names} is installed; run scripts/install.sh (Debian packages)")


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen
    workdir: Path
    log_path: Path
    _owned_tmp: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self._owned_tmp is not None:
            self._owned_tmp.cleanup()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PortInUse(ServerFailed):
    """The server exited because its port was taken between `free_port` and its bind (by a process that is not
    infercast's: an outgoing connection's ephemeral port, say).  The `start_*` helpers then try a fresh port."""


def _retry_port(start: Callable[[int], Server], port: int | None, attempts: int = 3) -> Server:
    """`start(port)` on the port asked for, or on a fresh `free_port()` (tried again if it was taken meanwhile)."""
    if port is not None:
        return start(port)
    for i in range(attempts):
        try:
            return start(free_port())
        except PortInUse:
            if i == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _start(
    name: str, argv: list[str], port: int, workdir: Path, ready_url: str | None, owned, timeout: float
) -> Server:
    log_path = workdir / f"{name}.log"
    logf = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(argv, cwd=workdir, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    srv = Server(name, port, proc, workdir, log_path, owned)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = srv.log()
            srv.close()
            error = PortInUse if "address already in use" in log.lower() else ServerFailed
            raise error(f"{name} exited with {proc.returncode}:\n{log}")
        try:
            if ready_url is None:  # Redis: it must answer PING (anything listening there is not enough)
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return srv
            elif requests.get(ready_url, timeout=0.5).status_code == 200:
                return srv
        except (OSError, requests.RequestException):
            pass
        time.sleep(0.1)
    srv.close()
    raise ServerFailed(f"{name} did not answer on port {port} within {timeout:.0f}s:\n{srv.log()}")


def _workdir(workdir: str | Path | None, files: dict[str, str] | None = None, data: str | None = None):
    """(the server's directory, the temporary directory it owns or None), with `files` (name -> text) written in
    it and the `data` subdirectory made."""
    if workdir is not None:
        wd, owned = Path(workdir), None
        wd.mkdir(parents=True, exist_ok=True)
    else:
        owned = tempfile.TemporaryDirectory(prefix="infercast-")
        wd = Path(owned.name)
    for name, text in (files or {}).items():
        (wd / name).write_text(text)
    if data:
        (wd / data).mkdir(exist_ok=True)
    return wd, owned


def prometheus_config(
    targets: dict[str, str],
    *,
    interval: str = "1s",
    scrape_timeout: str | None = None,
    rule_files: tuple[str, ...] = (),
    alertmanager: str | None = None,
) -> str:
    """A Prometheus config scraping infercast's services: job name -> `host:port`.  `honor_labels` keeps the
    exporter's own `instance`, `pool` and `version` labels (otherwise Prometheus renames them `exported_*`)."""
    lines = [f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}"]
    lines[0] += f", scrape_timeout: {scrape_timeout}}}" if scrape_timeout else "}"
    if rule_files:
        lines.append(f"rule_files: [{', '.join(rule_files)}]")
    if alertmanager:
        lines.append(f"alerting:\n  alertmanagers: [{{static_configs: [{{targets: ['{alertmanager}']}}]}}]")
    lines.append("scrape_configs:")
    for job, target in targets.items():
        lines.append(f"  - job_name: {job}\n    honor_labels: true\n    static_configs: [{{targets: ['{target}']}}]")
    return "\n".join(lines) + "\n"


def start_prometheus(
    config_yaml: str,
    *,
    rule_files: dict[str, str] | None = None,
    port: int | None = None,
    workdir: str | Path | None = None,
    extra_args: tuple[str, ...] = (),
    timeout: float = 30.0,
) -> Server:
    """Start Prometheus with `config_yaml`; `rule_files` are written beside it (name -> text)."""
    binary = which("prometheus")

    def start(port: int) -> Server:
        wd, owned = _workdir(workdir, {"prometheus.yml": config_yaml, **(rule_files or {})}, "data")
        argv = [
            binary,
            f"--config.file={wd / 'prometheus.yml'}",
            f"--storage.tsdb.path={wd / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--web.enable-admin-api",
            *extra_args,
        ]
        return _start("prometheus", argv, port, wd, f"http://127.0.0.1:{port}/-/ready", owned, timeout)

    return _retry_port(start, port)


def start_alertmanager(
    config_yaml: str, *, port: int | None = None, workdir: str | Path | None = None, timeout: float = 30.0
) -> Server:
    binary = which("prometheus-alertmanager", "alertmanager")

    def start(port: int) -> Server:
        wd, owned = _workdir(workdir, {"alertmanager.yml": config_yaml}, "am-data")
        argv = [
            binary,
            f"--config.file={wd / 'alertmanager.yml'}",
            f"--storage.path={wd / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--cluster.listen-address=127.0.0.1:{free_port()}",
        ]
        return _start("alertmanager", argv, port, wd, f"http://127.0.0.1:{port}/-/ready", owned, timeout)

    return _retry_port(start, port)


def start_redis(*, port: int | None = None, workdir: str | Path | None = None, timeout: float = 15.0) -> Server:
    binary = which("redis-server")

    def start(port: int) -> Server:
        wd, owned = _workdir(workdir)
        argv = [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(wd),
        ]
        return _start("redis", argv, port, wd, None, owned, timeout)

    return _retry_port(start, port)
