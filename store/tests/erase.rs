//! The retention lease on PostgreSQL: of several processes erasing in one
//! database (the nodes of a cluster), one holds the lease at a time, and a
//! lease released (or whose connection ended) is free for the next.
//! SQLite has one gateway, whose lease is always its own.

mod common;

use tether_store::testing::{open_postgres_eraser, postgres_server, TestDatabase};
use tether_store::{open_postgres, PostgresConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_sweeps_at_a_time() {
    let Some(server) = postgres_server() else {
        return;
    };
    let db = TestDatabase::create(&server).await;
    let cfg = PostgresConfig::new(&db.url);
    let opened = open_postgres(&cfg).await.expect("open");
    let first = opened.eraser.clone();
    let second = open_postgres_eraser(&cfg).await.expect("second eraser");

    assert!(
        first.try_lead().await.expect("lead"),
        "a free lease is taken"
    );
    assert!(first.try_lead().await.expect("lead"), "its holder keeps it");
    assert!(
        !second.try_lead().await.expect("lead"),
        "another process does not get a held lease"
    );
    first.release_lead().await.expect("release");
    assert!(
        second.try_lead().await.expect("lead"),
        "a released lease is free"
    );
    assert!(!first.try_lead().await.expect("lead"));
    // A process that ends (its connections with it) frees the lease.
    drop(second);
    let mut taken = false;
    for _ in 0..50 {
        if first.try_lead().await.expect("lead") {
            taken = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(taken, "the lease of a process that ended is free again");
}
