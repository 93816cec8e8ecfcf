"""Files written whole or not at all, ids that cannot name a path outside their folder, one writer per folder."""

from __future__ import annotations

import json
import os

import pytest

from data_builders.record_io import write_jsonl
from infra.files import OutputLock, OutputLocked, atomic_writer, id_file_name, write_text_atomic


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    path = write_text_atomic(tmp_path / "metrics.json", '{"prs_b": 81.5}\n')
    with pytest.raises(OSError, match="No space left"):
        with atomic_writer(path) as fh:
            fh.write('{"prs_b": ')
            raise OSError(28, "No space left on device")
    assert path.read_text() == '{"prs_b": 81.5}\n'
    assert os.listdir(tmp_path) == ["metrics.json"]  # no temporary file left behind

    def rows():
        yield {"id": "a"}
        raise OSError(28, "No space left on device")

    records = tmp_path / "records.jsonl"
    write_jsonl(records, [{"id": "x"}, {"id": "y"}])
    with pytest.raises(OSError):
        write_jsonl(records, rows())
    assert [json.loads(line)["id"] for line in records.read_text().splitlines()] == ["x", "y"]


@pytest.mark.parametrize("rid", ["../../x/y", "/abs/x", "..", "a/../../b", "c:\\\\d", "e f"])
def test_ids_never_name_a_path_outside_their_folder(tmp_path, rid):
    name = id_file_name(rid)
    target = (tmp_path / f"{name}.png").resolve()
    assert target.parent == tmp_path.resolve() and "/" not in name and not name.startswith(".")
    assert id_file_name(rid) != id_file_name(rid + "_")  # two ids, two names


def test_a_second_writer_stops_at_once_naming_the_holder(tmp_path):
    with OutputLock(tmp_path / "out", "eval.run"):
        with pytest.raises(OutputLocked, match=rf"in use by another run .*\"pid\": {os.getpid()}.*eval.run"):
            OutputLock(tmp_path / "out", "eval.run").acquire()
    with OutputLock(tmp_path / "out", "eval.run"):  # released: free again
        pass
