//! `tether-limit [--listen ADDR]`: the baseline broadcaster of
//! `tether_bench_limit`, on one thread. Prints `tether-limit listening on
//! http://ADDR` once it accepts (`127.0.0.1:0` by default picks a port).

use std::net::SocketAddr;

/// The listen backlog `tether serve` uses, so that a storm of reconnects
/// meets the same accept queue on both.
const BACKLOG: u32 = 4096;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .skip_while(|a| a != "--listen")
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(BACKLOG)?;
    println!(
        "tether-limit listening on http://{}",
        listener.local_addr()?
    );
    tether_bench_limit::serve(listener).await
}
