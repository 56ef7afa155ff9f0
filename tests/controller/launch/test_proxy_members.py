"""What a proxy's command line lists once the proxy was told an instance at its admin API."""

from __future__ import annotations

import pytest

from controller.launch.proxy_members import member_flag, membership_only, same, told

BASE = ["pdctl", "proxy", "--port", "9", "--mode", "read"]
P0, D0 = "http://127.0.0.1:10", "http://127.0.0.1:11"
LISTING = [*BASE, "--prefill", P0, "--decode", D0]


@pytest.mark.parametrize(
    ("role", "flag"),
    [
        ("prefill", "--prefill"),
        ("decode", "--decode"),
        ("encode", "--encode"),
        ("render", "--render"),
        ("colocated", "--instance"),
        ("both", "--instance"),
    ],
)
def test_each_role_has_its_flag(role, flag):
    assert member_flag(role) == flag


def test_a_new_instance_is_listed_after_the_others():
    assert told(LISTING, "http://127.0.0.1:12/", "decode") == [
        *LISTING,
        "--decode",
        "http://127.0.0.1:12",
    ]


def test_an_instance_told_another_role_is_listed_once_as_that_role():
    assert told(LISTING, P0, "decode") == [*BASE, "--decode", D0, "--decode", P0]


def test_a_forgotten_instance_is_no_longer_listed_whatever_its_suffix():
    zmq = [*BASE, "--prefill", f"{P0}/#host:1.2.3.4,handshake:5", "--decode", D0]
    assert told(zmq, P0, None) == [*BASE, "--decode", D0]


def test_forgetting_what_is_not_listed_changes_nothing_else():
    assert told(LISTING, "http://127.0.0.1:99", None) == LISTING


def test_a_flag_without_its_value_is_dropped_not_misread():
    assert told([*BASE, "--decode"], P0, None) == BASE


def test_the_order_of_the_listed_instances_does_not_make_two_command_lines_differ():
    swapped = [*BASE, "--decode", D0, "--prefill", P0]
    assert same(LISTING, swapped)
    assert not same(LISTING, [*BASE, "--prefill", D0, "--decode", P0])  # roles swapped
    assert not same(LISTING, [*BASE[:-1], "write", "--prefill", P0, "--decode", D0])
    assert not same(LISTING, [*BASE, "--prefill", P0])


def test_an_instance_listed_so_already_keeps_its_place():
    assert told(LISTING, f"{P0}/", "prefill") == LISTING


def test_membership_only_ignores_the_listed_instances_and_nothing_else():
    assert membership_only(LISTING, [*BASE, "--decode", "http://127.0.0.1:12"])
    assert not membership_only(LISTING, [*BASE[:-1], "write", "--prefill", P0, "--decode", D0])
