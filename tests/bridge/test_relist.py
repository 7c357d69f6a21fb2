"""The relist diff (app/bridge/relist.py): what a fresh list means against the objects
the bridge has published."""

from __future__ import annotations

from app.bridge.relist import Listed, RelistOutcome, deleted_meanwhile, page_changes


def listed(uid: str, rv: str) -> Listed:
    return Listed(uid, rv, f"key-{uid}", b'{"uid":"%s"}' % uid.encode())


def test_a_page_publishes_new_objects_as_added_and_changed_ones_as_modified_in_list_order():
    known = {"a": "10", "b": "11", "c": "12"}
    page = [listed("x", "30"), listed("a", "10"), listed("b", "20"), listed("y", "31"), listed("c", "12")]
    changes = page_changes(known.get, page)
    assert [(change, item.uid) for change, item in changes] == [("ADDED", "x"), ("MODIFIED", "b"), ("ADDED", "y")]
    assert changes[1][1] is page[2]  # the listed object itself, JSON and key included


def test_an_unchanged_page_publishes_nothing():
    assert page_changes({"a": "10"}.get, [listed("a", "10")]) == []


def test_objects_known_and_absent_from_the_whole_list_were_deleted_meanwhile_in_a_stable_order():
    assert deleted_meanwhile({"c": "1", "a": "1", "b": "1", "d": "1"}, {"b", "x"}) == ["a", "c", "d"]
    assert deleted_meanwhile({}, {"x"}) == []


def test_a_relist_that_found_nothing_needs_no_gap_marker():
    assert not RelistOutcome(published=0, deleted=0, deletions_complete=True).needs_gap


def test_a_relist_with_net_changes_or_unknown_deletions_needs_a_gap_marker():
    assert RelistOutcome(published=1, deleted=0, deletions_complete=True).needs_gap
    assert RelistOutcome(published=0, deleted=2, deletions_complete=True).needs_gap
    # The bridge could not rebuild what it had published: deletions may be missing.
    assert RelistOutcome(published=0, deleted=0, deletions_complete=False).needs_gap
