//! A TCP proxy between one gateway and its database, on loopback, that a
//! test switches between passing everything, going silent (every
//! connection held open, nothing forwarded either way) and resetting
//! (every connection reset, new ones reset as soon as they are accepted).
//! It runs on a thread and runtime of its own, so a test that blocks (a
//! gateway starting through it) never starves it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Passes every byte both ways.
    Normal,
    /// Holds every connection open and forwards nothing (what it reads
    /// meanwhile is passed on if the link comes back).
    Silent,
    /// Resets every connection, and each new one once accepted.
    Reset,
}

/// A running proxy; stopped when dropped.
pub struct Proxy {
    /// Where clients connect instead of the database.
    pub addr: SocketAddr,
    link: watch::Sender<Link>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Proxy {
    /// A proxy in front of `upstream` (`host:port`), passing everything.
    pub fn start(upstream: &str) -> Proxy {
        let upstream = upstream.to_string();
        let (link, watched) = watch::channel(Link::Normal);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
                let _ = addr_tx.send(listener.local_addr().expect("proxy address"));
                tokio::select! {
                    _ = accept_loop(listener, upstream, watched) => {}
                    _ = stopped => {}
                }
            });
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("proxy started");
        Proxy {
            addr,
            link,
            stop: Some(stop),
        }
    }

    /// A proxy in front of the database `url` names; returns it and the
    /// same URL through it.
    pub fn in_front_of(url: &str) -> (Proxy, String) {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (auth, rest) = rest.rsplit_once('@').map_or(("", rest), |(a, r)| (a, r));
        let (host_port, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
        let proxy = Proxy::start(host_port);
        let at = if auth.is_empty() { "" } else { "@" };
        let through = format!("{scheme}://{auth}{at}{}/{path}", proxy.addr);
        (proxy, through)
    }

    /// Switches the link.
    pub fn set(&self, link: Link) {
        let _ = self.link.send(link);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: String, link: watch::Receiver<Link>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if *link.borrow() == Link::Reset {
            reset(client);
            continue;
        }
        let upstream = upstream.clone();
        let link = link.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                reset(client);
                return;
            };
            connection(client, server, link).await;
        });
    }
}

/// One connection, until either side closes it or the link resets it.
async fn connection(mut client: TcpStream, mut server: TcpStream, link: watch::Receiver<Link>) {
    let resetting = {
        let (mut cr, mut cw) = client.split();
        let (mut sr, mut sw) = server.split();
        tokio::select! {
            _ = pump(&mut cr, &mut sw, link.clone()) => false,
            _ = pump(&mut sr, &mut cw, link.clone()) => false,
            _ = until_reset(link.clone()) => true,
        }
    };
    if resetting {
        reset(client);
        reset(server);
    }
}

/// Bytes from `from` to `to`, held while the link is silent.
async fn pump<R, W>(from: &mut R, to: &mut W, mut link: watch::Receiver<Link>)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        loop {
            let now = *link.borrow_and_update();
            match now {
                Link::Normal => break,
                Link::Reset => return,
                Link::Silent => {
                    if link.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn until_reset(mut link: watch::Receiver<Link>) {
    loop {
        if *link.borrow_and_update() == Link::Reset {
            return;
        }
        if link.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Closes `stream` with a reset (RST), not a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}
