//! `tether new`: create a session and print its id.
//!
//! The id alone goes to stdout so that `ID=$(tether new)` works; the
//! session is created without attaching this short-lived connection, so it
//! is not orphaned by our exit any more than by any client's.

use clap::Args;
use serde_json::{json, Map, Value};
use tether_protocol::CreateResult;

use super::conn::{ClientError, Conn};
use super::{exit, Target};

#[derive(Debug, Args)]
pub struct NewArgs {
    #[command(flatten)]
    pub target: Target,
    /// Title of the session.
    #[arg(long)]
    pub title: Option<String>,
}

pub async fn run(args: NewArgs) -> Result<u8, ClientError> {
    let mut conn = Conn::open(&args.target).await?;
    let mut params = Map::new();
    params.insert("attach".into(), Value::Bool(false));
    if let Some(title) = args.title {
        params.insert("title".into(), json!(title));
    }
    let created: CreateResult = conn.call("session.create", Value::Object(params)).await?;
    println!("{}", created.session.session_id);
    Ok(exit::OK)
}
