"""The one write-then-rename helper (scalable_softmax._atomic)."""
import os

import pytest

from scalable_softmax._atomic import atomic_open, atomic_path, file_mode


def test_a_finished_write_replaces_the_file_with_normal_permissions(tmp_path):
    target = tmp_path / "sub" / "t.txt"
    with atomic_open(target, "w", fsync=True) as fh:
        fh.write("new")
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == file_mode()
    assert [p.name for p in target.parent.iterdir()] == ["t.txt"]


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            assert os.path.basename(tmp).startswith(".t.txt.") and tmp.endswith(".tmp")
            open(tmp, "w").write("half")
            raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]
