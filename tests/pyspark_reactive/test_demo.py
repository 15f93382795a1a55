"""The demo (the README's first command) runs, ends by itself and checks its bounds."""

from __future__ import annotations

import pytest

from pyspark_reactive.demo import main


def test_demo_runs_and_every_bound_holds(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--elements", "3000", "--delay-ms", "0.05", "--batch-size", "16",
                   "--buffer-size", "32"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "3,000 of 3,000" in out and "ok" in out
    assert "BROKEN" not in out and out.count(": held") == 5


def test_demo_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--batch-size", "0"])
    assert exit_info.value.code == 2
    assert "--batch-size: must be >= 1, got 0" in capsys.readouterr().err
