//! A TCP forwarder between a page and the gateway, owned by the test, so
//! that the test can cut the page's connections from outside the page (as a
//! network does) and keep them down for a while.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A TCP forwarder to the gateway that the test can cut and hold down.
pub struct CutProxy {
    pub addr: String,
    down: Arc<AtomicBool>,
    pipes: Arc<Mutex<Vec<AbortHandle>>>,
}

impl CutProxy {
    pub async fn start(gateway: String) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let down = Arc::new(AtomicBool::new(false));
        let pipes = Arc::new(Mutex::new(Vec::new()));
        let (d, p) = (down.clone(), pipes.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if d.load(Ordering::SeqCst) {
                    // Down: the connection is refused as soon as it opens.
                    drop(client);
                    continue;
                }
                let gateway = gateway.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut upstream) = TcpStream::connect(&gateway).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
                p.lock().unwrap().push(task.abort_handle());
            }
        });
        CutProxy { addr, down, pipes }
    }

    /// Cuts every forwarded connection (both sockets close, as when a
    /// network drops) and refuses new ones until [`CutProxy::restore`].
    pub fn cut(&self) -> usize {
        self.down.store(true, Ordering::SeqCst);
        let pipes = std::mem::take(&mut *self.pipes.lock().unwrap());
        for p in &pipes {
            p.abort();
        }
        pipes.len()
    }

    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}
