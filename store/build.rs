//! Rebuild when a migration changes: `sqlx::migrate!` embeds the files at compile time and cargo
//! would not otherwise notice an edited `.sql` file.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
