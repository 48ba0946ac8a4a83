//! The backend conformance suite: one set of checks of the [`Backend`]
//! contract that every backend (memory, embedded, etcd) must pass unchanged.
//!
//! Each check is an async function taking a fresh, empty store. The
//! [`conformance_tests!`] macro turns the whole list into one `#[tokio::test]`
//! per check for a backend, given an async factory returning the store and a
//! guard that must outlive it (a temporary directory, a server):
//!
//! ```ignore
//! async fn make() -> (Arc<dyn Backend>, impl Sized) { … }
//! crate::store::conformance::conformance_tests!(make);
//! ```

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::{
    Backend, Condition, Error, EventKind, KeyValue, Range, RangeResult, Revision, WatchEvent,
    WatchStream,
};

/// Generates one `#[tokio::test]` per conformance check, each on a fresh
/// store from `$make` (an async fn returning `(Arc<dyn Backend>, guard)`).
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::store::conformance::conformance_tests!(@each $make;
            revisions_are_gap_free_and_failures_consume_none,
            conditions_report_expected_and_actual,
            delete_of_a_missing_key_is_not_found,
            recreating_a_key_resets_its_create_revision,
            range_is_prefix_isolated_and_byte_ordered,
            range_paginates_with_limit_and_start_after,
            range_reads_a_past_revision,
            range_written_writes_what_range_reads,
            future_and_compacted_revisions_are_refused,
            compaction_keeps_every_later_read_intact,
            watch_replays_history_then_follows_live_writes,
            watch_from_the_current_revision_sees_only_new_changes,
            watch_below_the_compaction_point_is_refused,
            a_slow_watcher_does_not_hold_up_others,
            concurrent_writers_on_distinct_keys,
            concurrent_compare_and_swap_on_shared_keys,
        );
    };
    (@each $make:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                // The guard (a temporary directory, …) outlives the store.
                let (store, _guard) = $make().await;
                $crate::store::conformance::$check(store).await;
            }
        )*
    };
}
pub(crate) use conformance_tests;

/// The store under test.
pub(crate) type Store = Arc<dyn Backend>;

/// How long a watch may take to deliver an event before the check fails.
const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

async fn put(store: &Store, key: &str, value: &str) -> KeyValue {
    store
        .put(key, value.as_bytes().to_vec(), Condition::Any)
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"))
}

async fn list(store: &Store, prefix: &str, revision: Option<Revision>) -> RangeResult {
    store
        .range(Range {
            prefix: prefix.into(),
            revision,
            ..Range::default()
        })
        .await
        .unwrap_or_else(|e| panic!("range {prefix} at {revision:?}: {e}"))
}

fn keys(result: &RangeResult) -> Vec<&str> {
    result.kvs.iter().map(|kv| kv.key.as_str()).collect()
}

async fn next_event(watch: &mut WatchStream) -> WatchEvent {
    match tokio::time::timeout(EVENT_TIMEOUT, watch.recv()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("watch failed: {e}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no watch event within {EVENT_TIMEOUT:?}"),
    }
}

fn summary(event: &WatchEvent) -> (Revision, EventKind, String, String, Revision, bool) {
    (
        event.revision(),
        event.kind,
        event.kv.key.clone(),
        String::from_utf8_lossy(&event.kv.value).into_owned(),
        event.kv.create_revision,
        event.created,
    )
}

/// Revisions start at 1 and grow by one per successful write; a failed
/// condition, a missing delete or a no-op compaction consumes none.
pub(crate) async fn revisions_are_gap_free_and_failures_consume_none(store: Store) {
    assert_eq!(store.current_revision().await.unwrap(), 0);
    assert_eq!(put(&store, "/a", "1").await.mod_revision, 1);
    assert_eq!(put(&store, "/b", "1").await.mod_revision, 2);
    assert!(
        store
            .put("/a", b"x".to_vec(), Condition::Absent)
            .await
            .is_err()
    );
    assert!(
        store
            .put("/a", b"x".to_vec(), Condition::ModRevision(2))
            .await
            .is_err()
    );
    assert!(store.delete("/nope", Condition::Any).await.is_err());
    assert_eq!(store.current_revision().await.unwrap(), 2);
    let kv = store
        .put("/a", b"2".to_vec(), Condition::ModRevision(1))
        .await
        .unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision), (1, 3));
    assert_eq!(
        store.delete("/b", Condition::Any).await.unwrap().revision,
        4
    );
    store.compact(2).await.unwrap();
    store.compact(1).await.unwrap();
    assert_eq!(put(&store, "/c", "1").await.mod_revision, 5);
    assert_eq!(store.current_revision().await.unwrap(), 5);
}

/// Conflicts name the key, the revision the writer expected and the one found.
pub(crate) async fn conditions_report_expected_and_actual(store: Store) {
    let a = store
        .put("/a", b"1".to_vec(), Condition::Absent)
        .await
        .unwrap();
    assert_eq!((a.create_revision, a.mod_revision), (1, 1));
    let conflict = |result: Result<(), Error>| match result {
        Err(Error::Conflict {
            key,
            expected,
            actual,
        }) => (key, expected, actual),
        other => panic!("expected a conflict, got {other:?}"),
    };
    let absent = store.put("/a", b"x".to_vec(), Condition::Absent).await;
    assert_eq!(conflict(absent.map(drop)), ("/a".to_owned(), None, Some(1)));
    let stale = store
        .put("/a", b"x".to_vec(), Condition::ModRevision(7))
        .await;
    assert_eq!(
        conflict(stale.map(drop)),
        ("/a".to_owned(), Some(7), Some(1))
    );
    let missing = store
        .put("/m", b"x".to_vec(), Condition::ModRevision(1))
        .await;
    assert_eq!(
        conflict(missing.map(drop)),
        ("/m".to_owned(), Some(1), None)
    );
    let delete_stale = store.delete("/a", Condition::ModRevision(9)).await;
    assert_eq!(
        conflict(delete_stale.map(drop)),
        ("/a".to_owned(), Some(9), Some(1))
    );
    let delete_absent = store.delete("/a", Condition::Absent).await;
    assert_eq!(
        conflict(delete_absent.map(drop)),
        ("/a".to_owned(), None, Some(1))
    );
    // The failed writes changed nothing.
    let now = store.get("/a").await.unwrap().unwrap();
    assert_eq!((&*now.value, now.mod_revision), (&b"1"[..], 1));
    assert_eq!(store.get("/m").await.unwrap(), None);
    let updated = store
        .put("/a", b"2".to_vec(), Condition::ModRevision(1))
        .await
        .unwrap();
    assert_eq!((updated.create_revision, updated.mod_revision), (1, 2));
    let deleted = store.delete("/a", Condition::ModRevision(2)).await.unwrap();
    assert_eq!(deleted.revision, 3);
    assert_eq!(deleted.prev, updated);
    assert_eq!(store.current_revision().await.unwrap(), 3);
}

/// Deleting a key that does not exist is `NotFound` (with `Any` or `Absent`),
/// and a conflict if it names a revision.
pub(crate) async fn delete_of_a_missing_key_is_not_found(store: Store) {
    for condition in [Condition::Any, Condition::Absent] {
        match store.delete("/nope", condition).await {
            Err(Error::NotFound { key }) => assert_eq!(key, "/nope"),
            other => panic!("expected NotFound, got {other:?}"),
        }
    }
    assert!(matches!(
        store.delete("/nope", Condition::ModRevision(1)).await,
        Err(Error::Conflict {
            expected: Some(1),
            actual: None,
            ..
        })
    ));
    put(&store, "/k", "v").await;
    store.delete("/k", Condition::Any).await.unwrap();
    assert!(matches!(
        store.delete("/k", Condition::Any).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(store.current_revision().await.unwrap(), 2);
}

/// A key's create revision is the revision that created it since it last did
/// not exist; its mod revision is the last write.
pub(crate) async fn recreating_a_key_resets_its_create_revision(store: Store) {
    let first = put(&store, "/k", "1").await;
    let second = put(&store, "/k", "2").await;
    assert_eq!((second.create_revision, second.mod_revision), (1, 2));
    assert_eq!(store.get("/k").await.unwrap().unwrap(), second);
    let deleted = store.delete("/k", Condition::Any).await.unwrap();
    assert_eq!((deleted.revision, &deleted.prev), (3, &second));
    assert_eq!(store.get("/k").await.unwrap(), None);
    assert!(list(&store, "/", None).await.kvs.is_empty());
    let again = store
        .put("/k", b"3".to_vec(), Condition::Absent)
        .await
        .unwrap();
    assert_eq!((again.create_revision, again.mod_revision), (4, 4));
    assert_eq!(&*again.value, b"3");
    assert_eq!(store.get("/k").await.unwrap().unwrap(), again);
    // At the old revision the old generation is visible.
    assert_eq!(list(&store, "/", Some(2)).await.kvs, [second]);
    assert_ne!(first, again);
}

/// A prefix matches exactly the keys that start with it, in byte order,
/// including keys equal to the prefix and keys with unusual characters.
pub(crate) async fn range_is_prefix_isolated_and_byte_ordered(store: Store) {
    let all = [
        "/a", "/a/", "/a/x", "/a/y/z", "/a/\u{0}", "/a/é", "/a/Z", "/ab/x", "/a0", "/b/x",
    ];
    for key in all {
        put(&store, key, key).await;
    }
    let mut expected: Vec<&str> = all
        .iter()
        .copied()
        .filter(|k| k.starts_with("/a/"))
        .collect();
    expected.sort();
    let got = list(&store, "/a/", None).await;
    assert_eq!(keys(&got), expected);
    assert!(!got.more);
    assert_eq!(got.revision, all.len() as Revision);
    for kv in &got.kvs {
        assert_eq!(&*kv.value, kv.key.as_bytes());
    }
    let mut everything: Vec<&str> = all.to_vec();
    everything.sort();
    assert_eq!(keys(&list(&store, "", None).await), everything);
    assert_eq!(keys(&list(&store, "/ab/", None).await), ["/ab/x"]);
    assert!(list(&store, "/c", None).await.kvs.is_empty());
    // The same isolation at a past revision.
    assert_eq!(
        keys(&list(&store, "/a/", Some(all.len() as Revision - 1)).await),
        expected
    );
}

/// `limit` and `start_after` page through one revision; `more` says whether
/// keys remain.
pub(crate) async fn range_paginates_with_limit_and_start_after(store: Store) {
    for i in 0..7 {
        put(&store, &format!("/p/{i}"), &i.to_string()).await;
    }
    put(&store, "/q/0", "q").await;
    let page = |start_after: Option<&str>, limit: usize, revision: Option<Revision>| {
        let store = store.clone();
        let start_after = start_after.map(str::to_owned);
        async move {
            store
                .range(Range {
                    prefix: "/p/".into(),
                    start_after,
                    limit,
                    revision,
                })
                .await
                .unwrap()
        }
    };
    let first = page(None, 3, None).await;
    assert_eq!(keys(&first), ["/p/0", "/p/1", "/p/2"]);
    assert!(first.more);
    let second = page(Some("/p/2"), 3, Some(first.revision)).await;
    assert_eq!(keys(&second), ["/p/3", "/p/4", "/p/5"]);
    assert!(second.more);
    let last = page(Some("/p/5"), 3, Some(first.revision)).await;
    assert_eq!(keys(&last), ["/p/6"]);
    assert!(!last.more);
    let exact = page(None, 7, None).await;
    assert_eq!(exact.kvs.len(), 7);
    assert!(
        !exact.more,
        "a limit equal to the count leaves nothing more"
    );
    assert_eq!(page(None, 0, None).await.kvs.len(), 7, "0 means no limit");
    // A continuation key before the prefix starts at the prefix; one after
    // every key gives nothing; one between keys continues after it.
    assert_eq!(keys(&page(Some("/"), 1, None).await), ["/p/0"]);
    assert!(page(Some("/p/9"), 0, None).await.kvs.is_empty());
    assert_eq!(keys(&page(Some("/p/3x"), 1, None).await), ["/p/4"]);
    // Pages at one revision ignore later writes.
    let at = first.revision;
    store.delete("/p/4", Condition::Any).await.unwrap();
    put(&store, "/p/35", "new").await;
    assert_eq!(
        keys(&page(Some("/p/3"), 2, Some(at)).await),
        ["/p/4", "/p/5"]
    );
    assert_eq!(keys(&page(Some("/p/3"), 2, None).await), ["/p/35", "/p/5"]);
}

/// `range_written` hands the writer exactly the versions `range` returns,
/// in order, for every kind of range (whole, limited, continued, past; long
/// enough for the embedded store to read in parts on several threads), and
/// a writer's error ends the read with that error.
pub(crate) async fn range_written_writes_what_range_reads(store: Store) {
    // Values of varied sizes, some keys rewritten or deleted (history), and
    // keys on both sides of the prefix.
    put(&store, "/v", "before").await;
    for i in 0..600 {
        put(&store, &format!("/w/{i:04}"), &"x".repeat(i % 37)).await;
    }
    put(&store, "/x", "after").await;
    let past = store.current_revision().await.unwrap();
    for i in (0..600).step_by(7) {
        put(&store, &format!("/w/{i:04}"), &format!("new {i}")).await;
    }
    for i in (3..600).step_by(11) {
        store
            .delete(&format!("/w/{i:04}"), Condition::Any)
            .await
            .unwrap();
    }
    let write = |version: super::VersionRef<'_>, out: &mut Vec<u8>| {
        let line = format!(
            "{} {} {} ",
            version.key, version.create_revision, version.mod_revision
        );
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(version.value);
        out.push(b'\n');
        Ok(())
    };
    let ranges = [
        (None, 0, None),
        (None, 5, None),
        (Some("/w/0100"), 0, None),
        (Some("/w/0100"), 450, None),
        (None, 0, Some(past)),
        (Some("/w/0020"), 500, Some(past)),
    ];
    for (start_after, limit, revision) in ranges {
        let range = Range {
            prefix: "/w/".into(),
            start_after: start_after.map(str::to_owned),
            limit,
            revision,
        };
        let read = store.range(range.clone()).await.unwrap();
        let written = store
            .range_written(range.clone(), Arc::new(write))
            .await
            .unwrap();
        let mut expected = Vec::new();
        for kv in &read.kvs {
            write(kv.as_version(), &mut expected).unwrap();
        }
        assert!(read.kvs.len() > 4, "{range:?}");
        assert_eq!(
            String::from_utf8(written.parts.concat()).unwrap(),
            String::from_utf8(expected).unwrap(),
            "{range:?}"
        );
        assert_eq!(written.count, read.kvs.len(), "{range:?}");
        assert_eq!(
            written.value_bytes,
            read.kvs.iter().map(|kv| kv.value.len()).sum::<usize>()
        );
        assert_eq!(
            written.last_key.as_deref(),
            read.kvs.last().map(|kv| kv.key.as_str())
        );
        assert_eq!((written.more, written.revision), (read.more, read.revision));
    }
    // A writer's error is the read's, from whichever part it came.
    for failing in ["/w/0001", "/w/0598"] {
        let refuse = move |version: super::VersionRef<'_>, _: &mut Vec<u8>| {
            if version.key == failing {
                Err(Error::Corrupt(format!("refused {failing}")))
            } else {
                Ok(())
            }
        };
        let range = Range {
            prefix: "/w/".into(),
            ..Default::default()
        };
        match store.range_written(range, Arc::new(refuse)).await {
            Err(Error::Corrupt(message)) => assert_eq!(message, format!("refused {failing}")),
            other => panic!("{failing}: {other:?}"),
        }
    }
}

/// A read at a past revision sees exactly the state then: old values, keys
/// deleted since, not keys created since.
pub(crate) async fn range_reads_a_past_revision(store: Store) {
    put(&store, "/r/a", "a1").await; // 1
    put(&store, "/r/b", "b1").await; // 2
    put(&store, "/r/a", "a2").await; // 3
    store.delete("/r/b", Condition::Any).await.unwrap(); // 4
    put(&store, "/r/c", "c1").await; // 5
    put(&store, "/r/b", "b2").await; // 6
    put(&store, "/r/a", "a3").await; // 7
    let at = |rev: Revision| {
        let store = store.clone();
        async move {
            let result = list(&store, "/r/", Some(rev)).await;
            assert_eq!(result.revision, rev);
            result
                .kvs
                .iter()
                .map(|kv| {
                    format!(
                        "{}={}@{}/{}",
                        kv.key,
                        String::from_utf8_lossy(&kv.value),
                        kv.create_revision,
                        kv.mod_revision
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(at(1).await, ["/r/a=a1@1/1"]);
    assert_eq!(at(2).await, ["/r/a=a1@1/1", "/r/b=b1@2/2"]);
    assert_eq!(at(3).await, ["/r/a=a2@1/3", "/r/b=b1@2/2"]);
    assert_eq!(at(4).await, ["/r/a=a2@1/3"]);
    assert_eq!(at(5).await, ["/r/a=a2@1/3", "/r/c=c1@5/5"]);
    assert_eq!(at(6).await, ["/r/a=a2@1/3", "/r/b=b2@6/6", "/r/c=c1@5/5"]);
    assert_eq!(at(7).await, ["/r/a=a3@1/7", "/r/b=b2@6/6", "/r/c=c1@5/5"]);
    // Revision 0 and None both mean the current revision.
    let current = list(&store, "/r/", Some(0)).await;
    assert_eq!(current.revision, 7);
    assert_eq!(current, list(&store, "/r/", None).await);
    // Paginated at a past revision.
    let page = store
        .range(Range {
            prefix: "/r/".into(),
            limit: 1,
            start_after: Some("/r/a".into()),
            revision: Some(3),
        })
        .await
        .unwrap();
    assert_eq!(keys(&page), ["/r/b"]);
    assert!(!page.more);
    let page = store
        .range(Range {
            prefix: "/r/".into(),
            limit: 1,
            revision: Some(6),
            ..Range::default()
        })
        .await
        .unwrap();
    assert_eq!(keys(&page), ["/r/a"]);
    assert!(page.more);
}

/// Reads past the current revision and at or below the compaction point fail
/// with the right error and numbers; so does compacting the future.
pub(crate) async fn future_and_compacted_revisions_are_refused(store: Store) {
    for i in 0..5 {
        put(&store, "/f", &i.to_string()).await;
    }
    let range_at = |rev: Revision| {
        let store = store.clone();
        async move {
            store
                .range(Range {
                    prefix: "/".into(),
                    revision: Some(rev),
                    ..Range::default()
                })
                .await
        }
    };
    assert!(matches!(
        range_at(6).await,
        Err(Error::FutureRevision {
            requested: 6,
            current: 5
        })
    ));
    assert!(matches!(
        store.compact(6).await,
        Err(Error::FutureRevision {
            requested: 6,
            current: 5
        })
    ));
    store.compact(3).await.unwrap();
    for rev in [1, 2, 3] {
        match range_at(rev).await {
            Err(Error::Compacted {
                requested,
                compacted,
            }) => assert_eq!((requested, compacted), (rev, 3)),
            other => panic!("range at {rev}: expected Compacted, got {other:?}"),
        }
    }
    assert!(matches!(range_at(-1).await, Err(Error::Compacted { .. })));
    let at4 = range_at(4).await.unwrap();
    assert_eq!(&*at4.kvs[0].value, b"3");
    // Compacting at or below the compaction point again is a no-op.
    store.compact(2).await.unwrap();
    store.compact(3).await.unwrap();
    assert_eq!(store.current_revision().await.unwrap(), 5);
    store.compact(5).await.unwrap();
    assert!(matches!(
        range_at(5).await,
        Err(Error::Compacted {
            requested: 5,
            compacted: 5
        })
    ));
    assert_eq!(&*list(&store, "/", None).await.kvs[0].value, b"4");
}

/// Compaction keeps current state and, for every read above the compaction
/// point, exactly what it returned before (the newest version at or below the
/// point unless it is a deletion).
pub(crate) async fn compaction_keeps_every_later_read_intact(store: Store) {
    // A mix of keys: updated before and after the point, deleted before,
    // deleted after, recreated, untouched.
    put(&store, "/c/keep", "k1").await; // 1
    put(&store, "/c/upd", "u1").await; // 2
    put(&store, "/c/upd", "u2").await; // 3
    put(&store, "/c/gone", "g1").await; // 4
    store.delete("/c/gone", Condition::Any).await.unwrap(); // 5
    put(&store, "/c/late", "l1").await; // 6
    put(&store, "/c/recreated", "r1").await; // 7
    store.delete("/c/recreated", Condition::Any).await.unwrap(); // 8
    put(&store, "/c/recreated", "r2").await; // 9
    put(&store, "/c/upd", "u3").await; // 10 (the compaction point)
    store.delete("/c/late", Condition::Any).await.unwrap(); // 11
    put(&store, "/c/upd", "u4").await; // 12
    put(&store, "/c/new", "n1").await; // 13
    let point = 10;
    let mut before = BTreeMap::new();
    for rev in point..=13 {
        before.insert(rev, list(&store, "/c/", Some(rev)).await);
    }
    let current = list(&store, "/c/", None).await;
    store.compact(point).await.unwrap();
    for (rev, expected) in &before {
        if *rev == point {
            continue;
        }
        assert_eq!(
            &list(&store, "/c/", Some(*rev)).await,
            expected,
            "range at {rev} changed by compaction at {point}"
        );
    }
    assert_eq!(list(&store, "/c/", None).await, current);
    assert_eq!(store.get("/c/keep").await.unwrap().unwrap().mod_revision, 1);
    assert_eq!(store.get("/c/gone").await.unwrap(), None);
    // Writes and further compaction keep working.
    put(&store, "/c/keep", "k2").await;
    store.compact(13).await.unwrap();
    let after = list(&store, "/c/", Some(14)).await;
    assert_eq!(
        keys(&after),
        ["/c/keep", "/c/new", "/c/recreated", "/c/upd"]
    );
    assert_eq!(store.current_revision().await.unwrap(), 14);
}

/// A watch replays every change after its revision, in order, with the
/// right kind, value and flags, then delivers live changes.
pub(crate) async fn watch_replays_history_then_follows_live_writes(store: Store) {
    put(&store, "/w/a", "1").await; // 1
    put(&store, "/w/b", "1").await; // 2
    put(&store, "/w/a", "2").await; // 3
    store.delete("/w/b", Condition::Any).await.unwrap(); // 4
    let mut from_start = store.watch(0).await.unwrap();
    let mut watch = store.watch(1).await.unwrap();
    put(&store, "/w/c", "1").await; // 5
    store.delete("/w/a", Condition::Any).await.unwrap(); // 6
    let expected = [
        (2, EventKind::Put, "/w/b", "1", 2, true),
        (3, EventKind::Put, "/w/a", "2", 1, false),
        (4, EventKind::Delete, "/w/b", "1", 2, false),
        (5, EventKind::Put, "/w/c", "1", 5, true),
        (6, EventKind::Delete, "/w/a", "2", 1, false),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(r, k, key, v, c, created)| (*r, *k, key.to_string(), v.to_string(), *c, *created))
        .collect();
    let mut got = Vec::new();
    for _ in 0..expected.len() {
        got.push(summary(&next_event(&mut watch).await));
    }
    assert_eq!(got, expected);
    let first = next_event(&mut from_start).await;
    assert_eq!(
        summary(&first),
        (1, EventKind::Put, "/w/a".into(), "1".into(), 1, true)
    );
    for want in &expected {
        assert_eq!(&summary(&next_event(&mut from_start).await), want);
    }
    // Live writes keep flowing, in order, after the replay.
    for i in 0..50 {
        put(&store, "/w/live", &i.to_string()).await;
    }
    for i in 0..50 {
        let event = next_event(&mut watch).await;
        assert_eq!(event.revision(), 7 + i);
        assert_eq!(&*event.kv.value, i.to_string().as_bytes());
    }
}

/// Watching from the current (or a future) revision sees only later changes.
pub(crate) async fn watch_from_the_current_revision_sees_only_new_changes(store: Store) {
    put(&store, "/n/a", "1").await;
    put(&store, "/n/b", "1").await;
    let mut now = store.watch(2).await.unwrap();
    let mut future = store.watch(4).await.unwrap();
    put(&store, "/n/c", "1").await; // 3
    put(&store, "/n/d", "1").await; // 4
    put(&store, "/n/e", "1").await; // 5
    assert_eq!(next_event(&mut now).await.kv.key, "/n/c");
    assert_eq!(next_event(&mut now).await.revision(), 4);
    let event = next_event(&mut future).await;
    assert_eq!((event.revision(), event.kv.key.as_str()), (5, "/n/e"));
    assert_eq!(next_event(&mut now).await.revision(), 5);
}

/// Watching from below the compaction point fails; from the point itself it
/// works.
pub(crate) async fn watch_below_the_compaction_point_is_refused(store: Store) {
    for i in 0..6 {
        put(&store, "/x", &i.to_string()).await;
    }
    store.compact(4).await.unwrap();
    for after in [0, 3] {
        match store.watch(after).await {
            Err(Error::Compacted {
                requested,
                compacted,
            }) => assert_eq!((requested, compacted), (after, 4)),
            other => panic!(
                "watch({after}): expected Compacted, got {:?}",
                other.map(|_| ())
            ),
        }
    }
    let mut watch = store.watch(4).await.unwrap();
    assert_eq!(next_event(&mut watch).await.revision(), 5);
    assert_eq!(next_event(&mut watch).await.revision(), 6);
}

/// One watcher that never reads does not hold up writers or other watchers,
/// and still gets everything, in order, when it finally reads.
pub(crate) async fn a_slow_watcher_does_not_hold_up_others(store: Store) {
    let mut slow = store.watch(0).await.unwrap();
    let mut fast = store.watch(0).await.unwrap();
    let writes: Revision = 3000;
    let reader = tokio::spawn(async move {
        for rev in 1..=writes {
            assert_eq!(next_event(&mut fast).await.revision(), rev);
        }
    });
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut tasks = Vec::new();
            for t in 0..8 {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..writes / 8 {
                        put(&store, &format!("/s/{t}/{i}"), "v").await;
                    }
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(60), writer)
        .await
        .expect("writers stalled behind a slow watcher")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("a fast watcher stalled behind a slow one")
        .unwrap();
    for rev in 1..=writes {
        assert_eq!(next_event(&mut slow).await.revision(), rev);
    }
}

/// 64 tasks × 200 puts on distinct keys: every acknowledged write is visible,
/// revisions are unique and dense, and a watch replays them all in order.
pub(crate) async fn concurrent_writers_on_distinct_keys(store: Store) {
    const TASKS: usize = 64;
    const PUTS: usize = 200;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::with_capacity(PUTS);
            for i in 0..PUTS {
                let key = format!("/d/{t:02}/{i:03}");
                let kv = store
                    .put(&key, key.as_bytes().to_vec(), Condition::Absent)
                    .await
                    .unwrap();
                assert_eq!(kv.create_revision, kv.mod_revision);
                acked.push(kv.mod_revision);
            }
            acked
        }));
    }
    let mut revisions = HashSet::new();
    for task in tasks {
        for rev in task.await.unwrap() {
            assert!(revisions.insert(rev), "revision {rev} given twice");
        }
    }
    let total = (TASKS * PUTS) as Revision;
    assert_eq!(revisions, (1..=total).collect::<HashSet<_>>());
    assert_eq!(store.current_revision().await.unwrap(), total);
    let all = list(&store, "/d/", None).await;
    assert_eq!(all.kvs.len(), TASKS * PUTS);
    for kv in &all.kvs {
        assert_eq!(&*kv.value, kv.key.as_bytes());
    }
    let mut watch = store.watch(0).await.unwrap();
    for rev in 1..=total {
        assert_eq!(next_event(&mut watch).await.revision(), rev);
    }
}

/// 64 tasks incrementing 8 shared counters with compare-and-swap retries: no
/// update is lost, and only successful writes consume revisions.
pub(crate) async fn concurrent_compare_and_swap_on_shared_keys(store: Store) {
    const TASKS: usize = 64;
    const INCREMENTS: usize = 100;
    const KEYS: usize = 8;
    for k in 0..KEYS {
        store
            .put(&format!("/cas/{k}"), b"0".to_vec(), Condition::Absent)
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0usize;
            for i in 0..INCREMENTS {
                let key = format!("/cas/{}", (t + i) % KEYS);
                let mut seen = store.get(&key).await.unwrap().unwrap();
                loop {
                    let n: u64 = std::str::from_utf8(&seen.value).unwrap().parse().unwrap();
                    match store
                        .put(
                            &key,
                            (n + 1).to_string().into_bytes(),
                            Condition::ModRevision(seen.mod_revision),
                        )
                        .await
                    {
                        Ok(_) => break,
                        Err(Error::Conflict {
                            expected, actual, ..
                        }) => {
                            conflicts += 1;
                            assert_eq!(expected, Some(seen.mod_revision));
                            let fresh = store.get(&key).await.unwrap().unwrap();
                            assert!(actual.unwrap() <= fresh.mod_revision);
                            assert!(fresh.mod_revision > seen.mod_revision);
                            seen = fresh;
                        }
                        Err(e) => panic!("cas put: {e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = list(&store, "/cas/", None).await;
    let sum: u64 = all
        .kvs
        .iter()
        .map(|kv| {
            std::str::from_utf8(&kv.value)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(sum, (TASKS * INCREMENTS) as u64, "an increment was lost");
    assert_eq!(
        store.current_revision().await.unwrap(),
        (KEYS + TASKS * INCREMENTS) as Revision,
        "a failed compare-and-swap consumed a revision"
    );
    let mut watch = store.watch(KEYS as Revision).await.unwrap();
    let mut last_value = [0u64; KEYS];
    for rev in (KEYS as Revision + 1)..=(KEYS + TASKS * INCREMENTS) as Revision {
        let event = next_event(&mut watch).await;
        assert_eq!(event.revision(), rev);
        let k: usize = event.kv.key["/cas/".len()..].parse().unwrap();
        let n: u64 = std::str::from_utf8(&event.kv.value)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(n, last_value[k] + 1, "counter {k} skipped a value");
        last_value[k] = n;
    }
}

mod memory {
    use std::sync::Arc;

    use crate::store::{Backend, MemoryBackend};

    async fn make() -> (Arc<dyn Backend>, ()) {
        (Arc::new(MemoryBackend::new()), ())
    }

    crate::store::conformance::conformance_tests!(make);
}
