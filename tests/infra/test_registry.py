"""infra.registry: a name exists once listed, its module is imported on its first get only, and a
bad name or a bad line fails with what is known."""

from __future__ import annotations

import sys

import pytest

from infra.registry import Registry


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A module ``reg_plugin_mod`` on the path, holding two members; unloaded afterwards."""
    (tmp_path / "reg_plugin_mod.py").write_text(
        "from types import SimpleNamespace\n\n"
        "LOADS = []\n"
        "LOADS.append(1)\n"
        "GOOD = SimpleNamespace(name='good', value=41)\n"
        "MISNAMED = SimpleNamespace(name='other', value=0)\n"
        "def plain():\n    return 7\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "reg_plugin_mod"
    sys.modules.pop("reg_plugin_mod", None)


def test_a_member_is_imported_on_its_first_get_only(plugin):
    reg = Registry("widget", {"good": f"{plugin}:GOOD", "plain": f"{plugin}:plain"})
    assert reg.names() == ["good", "plain"] and list(reg) == ["good", "plain"] and len(reg) == 2
    assert "good" in reg and "bad" not in reg
    assert plugin not in sys.modules  # listing names imports nothing
    assert reg.get("good").value == 41
    assert reg.get("plain")() == 7
    assert reg.get("good") is reg.get("good")
    assert sys.modules[plugin].LOADS == [1]  # imported once
    assert reg.where("plain") == f"{plugin}:plain"


def test_an_unknown_name_lists_the_known_ones_and_the_closest(plugin):
    reg = Registry("widget", {"good": f"{plugin}:GOOD", "plain": f"{plugin}:plain"})
    with pytest.raises(
        KeyError, match=r"unknown widget 'godo' \(known: good, plain\); did you mean 'good'\?"
    ):
        reg.get("godo")
    with pytest.raises(KeyError, match=r"unknown widget .zzz. \(known: good, plain\)\"$"):
        reg.where("zzz")


def test_bad_lines_are_refused(plugin):
    reg = Registry("widget", {"good": f"{plugin}:GOOD"})
    with pytest.raises(ValueError, match="widget 'good' is registered twice"):
        reg.add("good", f"{plugin}:plain")
    reg.add("good", f"{plugin}:GOOD")  # the same line again: nothing changes
    with pytest.raises(ValueError, match="'reg_plugin_mod.GOOD' is not 'module:attr'"):
        reg.add("dotted", f"{plugin}.GOOD")
    reg.add("other", f"{plugin}:MISNAMED")
    assert reg.get("other").value == 0  # listed under the name it carries
    reg.add("misnamed", f"{plugin}:MISNAMED")
    with pytest.raises(ValueError, match="widget 'misnamed': reg_plugin_mod:MISNAMED is named 'other'"):
        reg.get("misnamed")
    reg.add("gone", f"{plugin}:NOTHING")
    with pytest.raises(AttributeError, match="NOTHING"):
        reg.get("gone")
    reg.remove("gone")
    assert "gone" not in reg
