"""The cross-user tests run wherever the checkout lives: code that uid 65534 must import
from a folder it cannot enter (a clone under /root, a 0700 home) reaches it through a
world-readable mirror that ``run_as_other_user`` makes and removes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import other_user
import pytest


def test_a_package_in_a_private_folder_is_importable_by_the_other_uid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reason = other_user.other_user_reason(site_packages=True)
    if reason is not None:
        pytest.skip(reason)
    private = Path(tempfile.mkdtemp(prefix="private-checkout-"))  # 0700, like a home
    try:
        source = private / "p" / "src"
        (source / "tucked_away").mkdir(parents=True)
        (source / "tucked_away" / "__init__.py").write_text("WHERE = __file__\n")
        os.chmod(source / "tucked_away" / "__init__.py", 0o600)  # a file others cannot read
        monkeypatch.setattr(other_user, "SRC", source)
        done = other_user.run_as_other_user(
            "import json, os, tucked_away\n"
            "print(json.dumps({'uid': os.getuid(), 'where': tucked_away.WHERE}))\n",
            site_packages=True)
        assert done.returncode == 0, done.stderr[-2000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["uid"] == other_user.OTHER_UID
        assert not seen["where"].startswith(str(private))  # a mirror, not the private tree
        assert seen["where"].startswith(other_user._mirrors[str(source)])
        assert os.stat(source / "tucked_away" / "__init__.py").st_mode & 0o777 == 0o600
    finally:
        mirror = other_user._mirrors.pop(str(source), None)
        if mirror is not None:
            shutil.rmtree(os.path.dirname(mirror))
        shutil.rmtree(private, ignore_errors=True)
