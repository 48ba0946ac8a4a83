//! Files written by older builds open and are upgraded in place: format 2
//! kept the index of versions in an `index` table, which format 3 rebuilds
//! in memory and drops from the file.

use redb::{ReadableDatabase, ReadableTableMetadata, TableHandle};

use super::EmbeddedBackend;
use super::schema::{
    CURRENT, DB_FILE, LEGACY_INDEX, META, META_CLEANED, META_COMPACTED, META_FORMAT, META_REVISION,
    REVISIONS, encode, encoded_len, tombstone,
};
use crate::store::{Backend, EventKind, Range, Revision};

/// Writes a format-2 database by hand: `/a` put at 1 and 3, `/b` put at 2
/// and deleted at 4, `/c` put at 5.
fn format_2_file(dir: &std::path::Path) {
    let db = redb::Database::create(dir.join(DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut revisions = txn.open_table(REVISIONS).unwrap();
        let mut index = txn.open_table(LEGACY_INDEX).unwrap();
        let mut current = txn.open_table(CURRENT).unwrap();
        let mut meta = txn.open_table(META).unwrap();
        let changes: [(Revision, &str, Revision, Option<&str>); 5] = [
            (1, "/a", 1, Some("a1")),
            (2, "/b", 2, Some("b2")),
            (3, "/a", 1, Some("a3")),
            (4, "/b", 0, None),
            (5, "/c", 5, Some("c5")),
        ];
        for (revision, key, create, value) in changes {
            let bytes = match value {
                Some(value) => {
                    let mut out = vec![0; encoded_len(key, value.len())];
                    encode(&mut out, create, key, value.as_bytes());
                    out
                }
                None => tombstone(key),
            };
            revisions.insert(revision, bytes.as_slice()).unwrap();
            index.insert((key, revision), ()).unwrap();
        }
        current.insert("/a", (1, 3)).unwrap();
        current.insert("/c", (5, 5)).unwrap();
        for (name, value) in [
            (META_FORMAT, 2),
            (META_REVISION, 5),
            (META_COMPACTED, 0),
            (META_CLEANED, 0),
        ] {
            meta.insert(name, value).unwrap();
        }
    }
    txn.commit().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_2_file_is_upgraded_and_reads_as_before() {
    let dir = tempfile::tempdir().unwrap();
    format_2_file(dir.path());
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let values = |kvs: &[crate::store::KeyValue]| -> Vec<(String, String)> {
        kvs.iter()
            .map(|kv| {
                (
                    kv.key.clone(),
                    String::from_utf8(kv.value.to_vec()).unwrap(),
                )
            })
            .collect()
    };
    let now = store.range(Range::default()).await.unwrap();
    assert_eq!(now.revision, 5);
    assert_eq!(
        values(&now.kvs),
        [("/a".into(), "a3".into()), ("/c".into(), "c5".into())]
    );
    let at = |revision| Range {
        revision: Some(revision),
        ..Range::default()
    };
    let past = store.range(at(2)).await.unwrap();
    assert_eq!(
        values(&past.kvs),
        [("/a".into(), "a1".into()), ("/b".into(), "b2".into())]
    );
    let past = store.range(at(4)).await.unwrap();
    assert_eq!(values(&past.kvs), [("/a".into(), "a3".into())]);

    // The deletion replays with the value it removed.
    let mut watch = store.watch(0).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..5 {
        let event = watch.recv().await.unwrap().unwrap();
        seen.push((event.kind, event.kv.key.clone(), event.kv.mod_revision));
        if event.kind == EventKind::Delete {
            assert_eq!(&*event.kv.value, b"b2");
        }
    }
    assert_eq!(seen[3], (EventKind::Delete, "/b".into(), 4));
    drop(watch);
    store.close().await.unwrap();

    let db = redb::Database::open(dir.path().join(DB_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let tables: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_owned())
        .collect();
    assert!(!tables.contains(&"index".to_owned()), "{tables:?}");
    let meta = txn.open_table(META).unwrap();
    assert_eq!(
        meta.get(META_FORMAT).unwrap().unwrap().value(),
        super::schema::FORMAT_VERSION
    );
    assert_eq!(txn.open_table(REVISIONS).unwrap().len().unwrap(), 5);
}
