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


# -- in words (the advisor's proposals print these) ---------------------------------------------


def _proposed(rule: str) -> tuple[dict, dict]:
    from controller import DeploymentSpec, propose
    from tests.specs import nixl_1p1d

    spec = DeploymentSpec.model_validate(nixl_1p1d())
    change = propose(spec, rule, {})
    assert change is not None
    return spec.model_dump(mode="json"), change.spec.model_dump(mode="json")


def test_a_colocate_proposal_reads_as_groups_going_and_coming_not_python_dicts():
    from web.diff import describe

    lines = describe(*_proposed("light_traffic"))
    assert lines == [
        "connector: NixlConnector → none",
        "group prefill removed (role prefill, count 1, tp 1)",
        "group decode removed (role decode, count 1, tp 1)",
        "group colocated added (role colocated, count 2, tp 1)",
        "topology: disaggregated → colocated",
    ]
    assert not any("{'" in line or "None" in line for line in lines)


def test_a_field_of_a_named_group_reads_with_the_groups_name():
    from web.diff import describe

    assert describe(*_proposed("ttft_binding")) == ["group prefill: tp: 1 → 2"]


def test_values_read_as_yaml_writes_them():
    from web.diff import describe, words

    assert words({"bidirectional_kv_xfer": True}) == "{bidirectional_kv_xfer: true}"
    assert words(["a", 2]) == "[a, 2]" and words(None) == "none" and words({}) == "none"
    assert describe({"x": {}}, {"x": {"k": False}}) == ["x.k: set to false"]
    assert describe({"x": {"k": 1}}, {"x": {}}) == ["x.k: 1 removed"]
