//! Bringing stored sessions live: the row, the latest todo snapshot, and a
//! barrier through the writer for the committed seq.

use ractor::ActorRef;
use tether_protocol::{SessionStatus, Todos};
use tether_store::StoreError;
use tracing::{info, warn};

use super::{Loaded, RegistryMsg, SessionKey};
use crate::ctx::Ctx;
use crate::store_writer::{Barrier, StoreWriterMsg};

/// Reads a session row and, through the writer, its committed latest seq.
pub(super) async fn load_session(
    reader: &dyn tether_store::StoreRead,
    writer: Option<ActorRef<StoreWriterMsg>>,
    key: &SessionKey,
) -> Result<Option<Loaded>, StoreError> {
    let Some(first) = reader.get_session(&key.0, &key.1).await? else {
        return Ok(None);
    };
    if first.status == SessionStatus::Closed {
        let barrier = Barrier {
            latest_seq: first.latest_seq,
            gen: 0,
        };
        return Ok(Some(Loaded {
            row: first,
            barrier,
            todos: None,
        }));
    }
    let writer =
        writer.ok_or_else(|| StoreError::Unavailable("store writer is restarting".into()))?;
    // The barrier (not the read pool) tells the committed latest seq: an
    // append still queued from the session's previous life lands first.
    let barrier = writer
        .call(
            |port| StoreWriterMsg::Barrier {
                session_id: key.1.clone(),
                reply: port,
            },
            None,
        )
        .await;
    let barrier = match barrier {
        Ok(ractor::rpc::CallResult::Success(result)) => result?,
        _ => {
            return Err(StoreError::Unavailable(
                "store writer did not answer".into(),
            ))
        }
    };
    // Read again behind the barrier: the first read only told that the
    // session exists; its turn marker, counters and todos must include
    // what the previous life's last append wrote.
    let Some(row) = reader.get_session(&key.0, &key.1).await? else {
        return Ok(None);
    };
    let todos = reader
        .latest_todos(&key.1)
        .await?
        .and_then(|e| serde_json::from_str::<Todos>(&e.payload).ok());
    Ok(Some(Loaded {
        row,
        barrier,
        todos,
    }))
}

/// At start, sessions whose turns were cut short by a stop are brought live:
/// each one ends those turns (`gateway_restart` / `dequeued`) as it starts,
/// so clients see them ended without having to resume first.
pub(super) fn end_interrupted_turns(ctx: &Ctx, registry: &ActorRef<RegistryMsg>) {
    let reader = ctx.reader.clone();
    let registry = registry.clone();
    tokio::spawn(async move {
        let sessions = match reader.sessions_with_turn_marker().await {
            Ok(s) => s,
            Err(e) => return warn!(error = %e, "could not look for interrupted turns"),
        };
        for key in sessions {
            info!(session_id = %key.1, profile = %key.0, "session had turns running at the last stop");
            let _ = registry
                .call(
                    |reply| RegistryMsg::Resolve {
                        key,
                        load: true,
                        reply,
                    },
                    None,
                )
                .await;
        }
    });
}
