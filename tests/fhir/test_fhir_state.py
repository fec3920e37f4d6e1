"""fhir/state.py: what a server-state scorer sees as created, updated or deleted."""

from __future__ import annotations

from pytest_groundeval.fhir.state import diff_states, state_of

OBS = {"resourceType": "Observation", "id": "o1", "status": "final", "meta": {"versionId": "1"}}
SR = {"resourceType": "ServiceRequest", "id": "s1", "status": "active", "intent": "order"}


def test_created_updated_and_deleted_are_each_reported():
    before = state_of([OBS, {"resourceType": "Patient", "id": "p"}])
    after = state_of([{**OBS, "status": "amended"}, SR])
    got = [(c.kind, c.resource_type, c.id) for c in diff_states(before, after)]
    assert got == [("updated", "Observation", "o1"), ("deleted", "Patient", "p"), ("created", "ServiceRequest", "s1")]
    updated = diff_states(before, after)[0]
    assert updated.before["status"] == "final" and updated.after["status"] == "amended"


def test_a_resource_rewritten_unchanged_is_no_change_but_a_real_meta_change_is():
    bumped = {**OBS, "meta": {"versionId": "2", "lastUpdated": "2026-01-01T00:00:00Z"}}
    assert diff_states(state_of([OBS]), state_of([bumped])) == []
    tagged = {**OBS, "meta": {"versionId": "2", "tag": [{"code": "x"}]}}
    (change,) = diff_states(state_of([OBS]), state_of([tagged]))
    assert change.kind == "updated" and change.after["meta"] == {"tag": [{"code": "x"}]}
