//! Every ending a person is shown says what happened and whether sending
//! the prompt again helps, for every `failure_reason` the protocol defines
//! (`tether_protocol::FailureReason::ALL`, walked here so that a reason
//! added there without words everywhere fails): docs/PROTOCOL.md's table
//! lists exactly those, with their status and `recoverable`, and the web
//! console has words for each (gateway/src/console/endings.js, its
//! `ending` run with node). The terminal client's walk is a unit test next
//! to its rendering (client/src/outcome.rs).
//!
//! Without node the console's rendering is skipped with one `SKIPPED:`
//! line (a failure under `TETHER_REQUIRE_BROWSER=1`, as in CI); its table
//! is still checked.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::process::Command;

use serde_json::{json, Value};
use tether_protocol::FailureReason;

const PROTOCOL: &str = include_str!("../docs/PROTOCOL.md");
const CONSOLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/gateway/src/console");

/// `(reason, status, recoverable)` of each row of PROTOCOL.md's "Failure
/// reasons" table.
fn protocol_table() -> Vec<(String, String, String)> {
    let start = PROTOCOL
        .find("**Failure reasons.**")
        .expect("docs/PROTOCOL.md has a \"Failure reasons\" paragraph");
    let code = |cell: &str| cell.trim().trim_matches('`').to_string();
    PROTOCOL[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
            assert_eq!(cells.len(), 4, "a row of four cells: {row}");
            (code(cells[0]), code(cells[1]), code(cells[3]))
        })
        .collect()
}

#[test]
fn the_protocol_doc_lists_every_failure_reason_with_its_status_and_recoverable() {
    let table = protocol_table();
    let named: Vec<&str> = table.iter().map(|(r, _, _)| r.as_str()).collect();
    let defined: Vec<&str> = FailureReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(named, defined, "docs/PROTOCOL.md's table and FailureReason");
    for (reason, status, recoverable) in &table {
        let r = FailureReason::parse(reason).expect("a reason");
        assert_eq!(status, r.status().as_str(), "{reason}'s status");
        let documented = recoverable == "true";
        assert_eq!(documented, r.recoverable(), "{reason}'s recoverable");
    }
}

/// The console's JavaScript, every file of it.
fn console_js() -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(CONSOLE).expect("gateway/src/console") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "js") {
            all += &std::fs::read_to_string(&path).expect("a console file");
        }
    }
    all
}

#[test]
fn the_console_has_words_for_every_failure_reason() {
    let js = console_js();
    for reason in FailureReason::ALL {
        let entry = format!("\n  {}: {{", reason.as_str());
        let at = js
            .find(&entry)
            .unwrap_or_else(|| panic!("the console has no words for {reason}"));
        let rest = &js[at + entry.len()..];
        let body = &rest[..rest.find('}').expect("the entry ends")];
        assert!(body.contains("what:"), "{reason}: no `what`: {body}");
        assert!(body.contains("advice:"), "{reason}: no `advice`: {body}");
    }
}

/// What the console's `ending` makes of each payload, and the reasons its
/// table knows; `None` without node.
fn console_endings(payloads: &[Value]) -> Option<(Vec<Value>, Vec<String>)> {
    let script = format!(
        "import {{ ending, REASONS }} from {:?};\n\
         const payloads = JSON.parse(process.argv[1]);\n\
         console.log(JSON.stringify([payloads.map((p) => ending(p)), Object.keys(REASONS)]));",
        format!("file://{CONSOLE}/endings.js")
    );
    let out = match Command::new("node")
        .args(["--input-type=module", "-e", &script])
        .arg(Value::from(payloads.to_vec()).to_string())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            common::skip(
                "the console's endings in tests/ending_words.rs",
                &format!("cannot run node: {e}"),
                "apt-get install -y nodejs",
                "TETHER_REQUIRE_BROWSER",
            );
            return None;
        }
    };
    assert!(
        out.status.success(),
        "node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("node's JSON");
    let lines = v[0].as_array().expect("lines").clone();
    let known = v[1]
        .as_array()
        .expect("reasons")
        .iter()
        .map(|r| r.as_str().expect("a reason").to_string())
        .collect();
    Some((lines, known))
}

#[test]
fn the_console_tells_every_ending_what_happened_and_whether_to_send_it_again() {
    let mut payloads: Vec<Value> = FailureReason::ALL
        .iter()
        .map(|r| {
            let mut p =
                json!({"text": "", "status": r.status().as_str(), "failure_reason": r.as_str()});
            if r.recoverable() {
                p["recoverable"] = json!(true);
            }
            p
        })
        .collect();
    // An engine's own reason: its `recoverable` decides.
    payloads.push(json!({"text": "", "status": "error", "failure_reason": "rate_limited", "recoverable": false}));
    payloads.push(
        json!({"text": "", "status": "error", "failure_reason": "overloaded", "recoverable": true}),
    );
    payloads.push(json!({"text": "hi", "status": "complete"}));
    payloads.push(json!({"text": "", "status": "interrupted"}));
    let Some((lines, known)) = console_endings(&payloads) else {
        return;
    };
    let defined: Vec<String> = FailureReason::ALL
        .iter()
        .map(|r| r.as_str().to_string())
        .collect();
    assert_eq!(known, defined, "the console's reasons and FailureReason");
    for (reason, line) in FailureReason::ALL.iter().zip(&lines) {
        let r = reason.as_str();
        let line = line.as_str().unwrap_or_else(|| panic!("{r}: no line"));
        let (what, advice) = line
            .split_once(&format!(" ({r}); "))
            .unwrap_or_else(|| panic!("{r}: not named, or no advice: {line}"));
        assert!(!what.trim().is_empty(), "{r}: says nothing: {line}");
        if reason.recoverable() {
            assert_eq!(advice, "send it again", "{r}: {line}");
        } else {
            assert!(
                !advice.is_empty() && advice != "send it again",
                "{r}: {line}"
            );
        }
    }
    let n = FailureReason::ALL.len();
    let engine = |i: usize| lines[n + i].as_str().unwrap_or_default().to_string();
    assert!(
        engine(0).ends_with("(rate_limited); sending it again may fail the same way"),
        "{}",
        engine(0)
    );
    assert!(
        engine(1).ends_with("(overloaded); send it again"),
        "{}",
        engine(1)
    );
    assert_eq!(lines[n + 2], Value::Null, "a completed turn has no ending");
    assert_eq!(lines[n + 3], "interrupted");
}
