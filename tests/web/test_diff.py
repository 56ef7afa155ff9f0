"""The pure field-level diff behind /api/deployments/{name}/diff."""

from __future__ import annotations

from web.diff import Change, diff


def test_nested_changes_additions_and_removals() -> None:
    old = {"a": 1, "b": {"c": [1, 2], "d": "x"}, "gone": True}
    new = {"a": 1, "b": {"c": [1, 3, 4], "d": "x"}, "new": None}
    assert diff(old, new) == [
        Change(("b", "c", 1), 2, 3, "changed"),
        Change(("b", "c", 2), None, 4, "added"),
        Change(("gone",), True, None, "removed"),
        Change(("new",), None, None, "added"),
    ]


def test_a_type_change_is_one_change() -> None:
    assert diff({"x": [1]}, {"x": {"y": 1}}) == [Change(("x",), [1], {"y": 1}, "changed")]


def test_equal_documents_have_no_changes() -> None:
    assert diff({"a": [{"b": 1}]}, {"a": [{"b": 1}]}) == []
