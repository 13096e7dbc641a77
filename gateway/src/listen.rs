//! Accepting connections: the accept loop in front of the axum routes.
//!
//! `axum::serve` has no knobs for what a gateway facing the internet needs
//! before any route runs, so tether runs hyper's HTTP/1 connection itself:
//!
//! - `TCP_NODELAY` on every socket: events are small frames that must leave
//!   at once, and Nagle's algorithm would hold each behind the previous
//!   one's ACK (40 ms with delayed ACKs).
//! - A handshake timeout: a client must send its request head (the
//!   WebSocket upgrade included) within `--handshake-timeout-s`, so sockets
//!   opened and left silent (slowloris) do not pile up.
//! - `--max-connections`: each connection holds a permit for its whole life
//!   (a WebSocket takes its connection's permit along when it upgrades);
//!   one over the cap is answered `503` and closed. Only `/healthz` is
//!   still served over the cap (to at most [`OVERFLOW_CONNECTIONS`] at
//!   once, each for one request): a full gateway is alive, and an
//!   orchestrator that read 503 there would restart it.
//! - Out of descriptors: `accept` fails with `EMFILE` while clients wait
//!   in the backlog, where they would hang until a descriptor frees up. One
//!   descriptor is kept in reserve (`/dev/null`); on `EMFILE` it is given
//!   up for a moment to take the waiting client, answer it `503` and close
//!   it, so a client is told rather than left hanging.
//! - The remote address, as axum's `ConnectInfo<SocketAddr>`, for the
//!   per-address rate buckets of the HTTP routes, and the local one
//!   ([`LocalAddr`]) for the Host rule of `crate::origin`.
//! - A deep listen backlog ([`bind`]): after a network blip every client
//!   reconnects in the same second, and tokio's default of 128 pending
//!   connections overflows; a dropped SYN is retried by the client's kernel
//!   only after 1 s, which alone would put the reconnect p99 over a second.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;
use tracing::{debug, warn};

/// Pending connections the kernel may queue before `accept` (capped by
/// `net.core.somaxconn`, 4096 on current kernels).
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as tokio's
/// `TcpListener::bind` does, so a restarted gateway gets its port back
/// while old connections sit in TIME_WAIT).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// What the accept loop enforces.
#[derive(Debug, Clone, Copy)]
pub struct ListenLimits {
    pub max_connections: usize,
    pub handshake_timeout: Duration,
}

impl Default for ListenLimits {
    /// Generous limits for benchmarks and embedders.
    fn default() -> Self {
        Self {
            max_connections: 1 << 20,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// The address a connection was accepted on.
#[derive(Debug, Clone, Copy)]
pub struct LocalAddr(pub SocketAddr);

/// A connection's place under `--max-connections`, in every request's
/// extensions; the WebSocket route takes it so that it outlives the HTTP
/// connection that upgraded.
#[derive(Clone, Default)]
pub struct ConnPermit(Arc<Mutex<Option<OwnedSemaphorePermit>>>);

impl ConnPermit {
    pub fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 24\r\n\r\n\
too many connections now";

const OUT_OF_DESCRIPTORS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 23\r\n\r\n\
out of file descriptors";

/// Connections over `--max-connections` that are read far enough to
/// answer `/healthz`; more than that at once are refused unread.
pub const OVERFLOW_CONNECTIONS: usize = 64;

/// Serves `router` on `listener` until `shutdown` turns true; connections
/// still open then are asked to finish (WebSockets are closed by their own
/// tasks on the same signal).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenLimits,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_CONNECTIONS));
    let mut reserve = FdReserve::new();
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_out_of_descriptors(&e) => {
                    if !reserve.refuse_one(&listener).await {
                        // No reserve to spend (it could not be reopened):
                        // back off so a full fd table is not spun on.
                        warn!(error = %e, "accept failed: out of file descriptors");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
                Err(e) => {
                    // A connection reset before accept and the like: not
                    // fatal; back off a little.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => return Ok(()),
        };
        if let Err(e) = tcp.set_nodelay(true) {
            debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            match overflow.clone().try_acquire_owned() {
                Ok(place) => {
                    tokio::spawn(over_capacity(
                        tcp,
                        remote,
                        router.clone(),
                        limits.handshake_timeout,
                        place,
                    ));
                }
                Err(_) => {
                    tokio::spawn(refuse(tcp));
                }
            }
            continue;
        };
        tokio::spawn(connection(
            tcp,
            remote,
            router.clone(),
            ConnPermit(Arc::new(Mutex::new(Some(permit)))),
            limits.handshake_timeout,
            shutdown.clone(),
        ));
    }
}

async fn connection(
    tcp: TcpStream,
    remote: SocketAddr,
    router: Router,
    permit: ConnPermit,
    handshake_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let local = tcp.local_addr().ok().map(LocalAddr);
    let service = router.map_request(move |req: Request<Incoming>| {
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(ConnectInfo(remote));
        if let Some(local) = local {
            req.extensions_mut().insert(local);
        }
        req.extensions_mut().insert(permit.clone());
        req
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(handshake_timeout)
        .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service))
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                debug!(error = %e, %remote, "connection ended with an error");
            }
        }
        _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
        }
    }
}

/// A connection over `--max-connections`: one request is read (within
/// the handshake timeout); `/healthz` goes to the router, anything else is
/// `503` with `Retry-After`, and the connection is closed after it.
async fn over_capacity(
    tcp: TcpStream,
    remote: SocketAddr,
    router: Router,
    handshake_timeout: Duration,
    _place: OwnedSemaphorePermit,
) {
    let local = tcp.local_addr().ok().map(LocalAddr);
    let service = tower::service_fn(move |req: Request<Incoming>| {
        let router = router.clone();
        async move {
            if req.uri().path() != "/healthz" {
                return Ok::<_, Infallible>(too_many_connections());
            }
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(remote));
            if let Some(local) = local {
                req.extensions_mut().insert(local);
            }
            router.oneshot(req).await
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(handshake_timeout)
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
    // Bounded as a whole too: a client that reads the answer slowly does
    // not keep its overflow place.
    let _ = tokio::time::timeout(handshake_timeout * 2, conn).await;
}

fn too_many_connections() -> axum::response::Response {
    let mut resp = axum::response::Response::new(Body::from("too many connections now"));
    *resp.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
    let headers = resp.headers_mut();
    headers.insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain"),
    );
    resp
}

/// `EMFILE` (this process) or `ENFILE` (the whole system).
fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    )
}

/// One descriptor held back for the moment the process has none left.
struct FdReserve(Option<std::fs::File>);

impl FdReserve {
    fn new() -> Self {
        FdReserve(Self::open())
    }

    fn open() -> Option<std::fs::File> {
        std::fs::File::open("/dev/null")
            .map_err(|e| warn!(error = %e, "cannot keep a spare file descriptor"))
            .ok()
    }

    /// Frees the spare descriptor, takes one waiting client with it,
    /// answers it `503` and closes it, then takes the spare back. Whether
    /// there was a spare to spend.
    async fn refuse_one(&mut self, listener: &TcpListener) -> bool {
        let Some(spare) = self.0.take() else {
            self.0 = Self::open();
            return false;
        };
        drop(spare);
        // The failed accept says a client is waiting; a bound keeps the
        // loop from stalling if it left meanwhile.
        if let Ok(Ok((tcp, remote))) =
            tokio::time::timeout(Duration::from_millis(100), listener.accept()).await
        {
            debug!(%remote, "out of file descriptors: answered 503");
            refuse_now(tcp);
        }
        self.0 = Self::open();
        true
    }
}

/// Answers `503` at once and closes, without waiting on the client: the
/// descriptor must be free again before the next accept. What the client
/// already sent is read first, so the close is a FIN and not a reset that
/// could destroy the answer before the client reads it.
fn refuse_now(tcp: TcpStream) {
    use std::io::{Read, Write};
    let Ok(mut tcp) = tcp.into_std() else {
        return;
    };
    let mut buf = [0u8; 4096];
    while matches!(tcp.read(&mut buf), Ok(n) if n > 0) {}
    let _ = tcp.write_all(OUT_OF_DESCRIPTORS);
    let _ = tcp.shutdown(std::net::Shutdown::Write);
}

async fn refuse(mut tcp: TcpStream) {
    // Best effort: the client may already be gone.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = tcp.write_all(OVER_CAPACITY).await;
        let _ = tcp.shutdown().await;
    })
    .await;
}
