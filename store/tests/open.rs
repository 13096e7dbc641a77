//! Opening the store: directory creation, migrations, the epoch.

mod common;

use tether_store::{open_sqlite, open_sqlite_writer, StoreError, Synchronous};

fn is_epoch(s: &str) -> bool {
    s.len() == 16
        && s.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

#[tokio::test]
async fn first_open_creates_dir_and_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path());
    assert!(!cfg.db_path.parent().unwrap().exists());
    let opened = open_sqlite(&cfg).await.unwrap();
    assert!(is_epoch(&opened.epoch), "{:?}", opened.epoch);
    assert_eq!(opened.reader.epoch(), opened.epoch);
    assert!(cfg.db_path.exists());
}

#[tokio::test]
async fn reopening_keeps_the_epoch_and_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path());
    let mut first = open_sqlite(&cfg).await.unwrap();
    common::commit_ok(&mut first, &[common::create("s_1", "default", 10, 2)]).await;
    let epoch = first.epoch.clone();
    drop(first);

    let second = open_sqlite(&cfg).await.unwrap();
    assert_eq!(second.epoch, epoch);
    let row = second
        .reader
        .get_session("default", &common::sid("s_1"))
        .await
        .unwrap()
        .expect("session survives a reopen");
    assert_eq!(row.latest_seq, 3);
}

#[tokio::test]
async fn a_new_store_gets_a_new_epoch() {
    let (_a, _, one) = common::fresh().await;
    let (_b, _, two) = common::fresh().await;
    assert!(is_epoch(&two.epoch));
    assert_ne!(one.epoch, two.epoch);
}

#[tokio::test]
async fn synchronous_full_opens_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(dir.path());
    cfg.synchronous = Synchronous::Full;
    let mut opened = open_sqlite(&cfg).await.unwrap();
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 0)]).await;
}

#[tokio::test]
async fn writer_alone_needs_an_existing_store() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path());
    std::fs::create_dir_all(cfg.db_path.parent().unwrap()).unwrap();
    let err = open_sqlite_writer(&cfg).await.err().expect("no store yet");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert_eq!(err.code(), 5072);
    assert!(!cfg.db_path.exists(), "must not create an empty store");
}

#[tokio::test]
async fn a_restarted_writer_continues_where_the_old_one_stopped() {
    let (_dir, cfg, mut opened) = common::fresh().await;
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 1)]).await;
    // The StoreWriter actor died: its connection goes, a new one is opened.
    let tether_store::Opened { writer, reader, .. } = opened;
    drop(writer);
    let mut writer = open_sqlite_writer(&cfg).await.unwrap();
    assert_eq!(writer.latest_seq(&common::sid("s_1")).await.unwrap(), 2);
    let results = writer.commit(vec![common::append("s_1", 3, 2, 3)]).await;
    assert_eq!(results, vec![Ok(())]);
    let events = reader
        .events_since(&common::sid("s_1"), 0, 100)
        .await
        .unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}
