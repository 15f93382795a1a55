"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", [b for b in BLOCKS if "test_my_streams.py" not in b
                                   and "local_session" not in b])
def test_usage_example_runs(block: str) -> None:
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def test_tck_example_passes_under_pytest(tmp_path: Path) -> None:
    (block,) = [b for b in BLOCKS if "test_my_streams.py" in b]
    (tmp_path / "test_my_streams.py").write_text(block)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    passed = int(re.search(r"(\d+) passed", result.stdout).group(1))  # type: ignore[union-attr]
    assert passed >= 80 and "failed" not in result.stdout
