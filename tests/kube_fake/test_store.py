"""Unit tests of the fake's store: selectors, resourceVersion, history/410, validation."""

from __future__ import annotations

import pytest

from runlane.testing.kube.store import (
    CONFIGMAPS,
    JOBS,
    PODS,
    ApiError,
    Store,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)


def _obj(**labels: str) -> dict[str, object]:
    return {"metadata": {"name": "o", "labels": labels}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),  # != also matches objects without the key
        ("a in (1, 2)", {"a": "2"}, True),
        ("a notin (1,2)", {"a": "3"}, True),
        ("a notin (1,2)", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a=1,b in (x),!c", {"a": "1", "b": "x"}, True),
        ("batch.kubernetes.io/job-name=j", {"batch.kubernetes.io/job-name": "j"}, True),
        ("", {"x": "y"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert labels_match(parse_label_selector(selector), _obj(**labels)) is expected


@pytest.mark.parametrize("bad", ["a=b=c d", "a in (", "=x", "a,,b"])
def test_bad_label_selector_is_400(bad: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(bad)
    assert err.value.code == 400


def test_field_selectors() -> None:
    ev = {
        "metadata": {"name": "e", "namespace": "default"},
        "involvedObject": {"name": "p", "kind": "Pod"},
    }
    from runlane.testing.kube.store import EVENTS

    assert fields_match(
        parse_field_selector("involvedObject.name=p,involvedObject.kind=Pod", EVENTS), ev
    )
    assert not fields_match(parse_field_selector("involvedObject.name!=p", EVENTS), ev)
    with pytest.raises(ApiError) as err:
        parse_field_selector("spec.nope=1", JOBS)
    assert err.value.code == 400
    assert err.value.message == "field label not supported: spec.nope"


def test_resource_version_is_global_and_monotonic_and_history_expires() -> None:
    store = Store(history_limit=3)
    rvs = []
    for i in range(5):
        obj = store.create(
            PODS,
            "default",
            {"metadata": {"name": f"p{i}"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        )
        rvs.append(int(obj["metadata"]["resourceVersion"]))
    assert rvs == sorted(rvs)
    assert len(set(rvs)) == 5
    assert [e.rv for e in store.events_since(rvs[3])] == [rvs[4]]
    with pytest.raises(ApiError) as err:
        store.events_since(rvs[0])
    assert err.value.code == 410
    assert err.value.reason == "Expired"
    assert err.value.message.startswith(f"too old resource version: {rvs[0]} (")
    # a no-op write keeps the resourceVersion
    same = store.write(PODS, dict(store.get(PODS, "default", "p4")))
    assert int(same["metadata"]["resourceVersion"]) == rvs[4]
    store.compact()
    assert store.events_since(rvs[4]) == []  # resuming at the newest rv is fine after compaction
    with pytest.raises(ApiError):
        store.events_since(rvs[3])


def test_generate_name_and_validation() -> None:
    store = Store()
    cm = store.create(CONFIGMAPS, "default", {"metadata": {"generateName": "cfg-"}})
    assert cm["metadata"]["name"].startswith("cfg-")
    assert len(cm["metadata"]["name"]) == 9
    with pytest.raises(ApiError) as err:
        store.create(
            PODS,
            "default",
            {
                "metadata": {"name": "p", "labels": {"k": "x" * 64}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        )
    assert err.value.code == 422
    assert "must be no more than 63 characters" in err.value.message
    with pytest.raises(ApiError) as err:
        store.create(PODS, "default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    assert err.value.details is not None
    assert err.value.details["causes"][0]["field"] == "spec.containers"
