"""Issue 24, item 7: config bounds.  What the user sees: a repeated key is an error naming its line (before: the
last value silently won), and `nodes: 100000000` is refused with the maximum (before: accepted, memory grew 16 MB/s);
both exit 2 from the command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infercast.config import ConfigError, load_config
from tests.conftest import REPO

FLASH = (REPO / "examples" / "flash-sale.yaml").read_text()


def test_a_repeated_key_is_refused_with_its_line(tmp_path):
    lines = FLASH.splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("nodes:"))
    lines.insert(i + 1, lines[i].replace(lines[i].strip(), "nodes: 400"))
    path = tmp_path / "dup.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=rf"duplicate key 'nodes' \(line {i + 2}; first on line {i + 1}\)"):
        load_config(path)


def test_a_hundred_million_nodes_is_refused_with_the_maximum_and_rc_2(tmp_path):
    lines = FLASH.splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("nodes:"))
    lines[i] = lines[i].split("nodes:")[0] + "nodes: 100000000"
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="less than or equal to 10000"):
        load_config(path)
    r = subprocess.run([sys.executable, "-m", "infercast.tools.cli", "actuator", "--config", str(path)],
                       capture_output=True, text=True, timeout=120, cwd=REPO, check=False)  # fmt: skip
    assert r.returncode == 2 and "less than or equal to 10000" in r.stderr, (r.returncode, r.stderr[-500:])
