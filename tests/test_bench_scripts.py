"""The bench scripts run as the docs write them: `bench/perf.py --size 10000 ...`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
_SCRIPTS = sorted(p for p in (_ROOT / "bench").glob("*.py")
                  if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8"))


def test_every_bench_script_is_a_command() -> None:
    # the README and bench/README.md name them as commands (`bench/perf.py --size 10000
    # --size 100000`), which the shell refused: "Permission denied", no shebang either
    assert len(_SCRIPTS) >= 10
    for script in _SCRIPTS:
        assert script.read_text(encoding="utf-8").startswith("#!/usr/bin/env python3\n"), script
        assert os.access(script, os.X_OK), script


@pytest.mark.parametrize("name", ["perf.py", "pydocs.py"])
def test_a_bench_script_typed_as_written_prints_its_help(name: str) -> None:
    # in an activated virtual environment: its python3 first on the PATH
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run([f"bench/{name}", "--help"], cwd=_ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage:"), res.stdout


def test_many_collections_probes_each_filled_count_once() -> None:
    # `--collections 3` probed the same 5 collections at checkpoints 60, 120 and 170 too
    from funnel_util import load_module

    many = load_module("bench_many_collections", _ROOT / "bench" / "many_collections.py")
    assert many.checkpoint_counts("0,60,120,170", 3) == [0, 3]
    assert many.checkpoint_counts("0,60,120,170", 170) == [0, 60, 120, 170]
    assert many.checkpoint_counts("60,0", 400) == [0, 60]
