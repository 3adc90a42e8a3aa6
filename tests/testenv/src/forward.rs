//! A hub that appears at an address where nothing answered before: a TCP forwarder started
//! late on a loopback port, relaying every connection to a real apiserver byte for byte (TLS
//! and all, end to end). Tests start a binary against the port while nothing listens there (a
//! hub that cannot be reached), check that it waits ([`waiting_for`]), then start the
//! forwarder (the hub is back).

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::Error;

/// Relays connections from its port to a target address until dropped (then it stops
/// accepting and the connections it relays are closed).
pub struct Forwarder {
    address: SocketAddr,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// Listens on `127.0.0.1:port` and relays each connection to `target`. Spawned on the
    /// current tokio runtime.
    pub async fn start(port: u16, target: SocketAddr) -> Result<Self, Error> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(Error::io(format!("listen on 127.0.0.1:{port} to forward")))?;
        let address = listener
            .local_addr()
            .map_err(Error::io("read the forwarder's address"))?;
        let task = tokio::spawn(async move {
            let mut relays = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                relays.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                // Forget the relays that are done.
                while relays.try_join_next().is_some() {}
            }
        });
        Ok(Self { address, task })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every relay.
        self.task.abort();
    }
}

/// How a binary waiting for its hub at `server` answers its probes on `metrics`: `/healthz`
/// 200 and `/readyz` 503 `waiting for the hub apiserver at <server>…`. `Ok` with `/readyz`'s
/// body, else what it answered instead.
pub async fn waiting_for(metrics: SocketAddr, server: &str) -> Result<String, String> {
    let (healthz, body) = crate::http::get(metrics, "/healthz").await?;
    if healthz != 200 {
        return Err(format!("/healthz answered {healthz}: {body}"));
    }
    let (readyz, body) = crate::http::get(metrics, "/readyz").await?;
    let want = format!("waiting for the hub apiserver at {server}");
    if readyz != 503 || !body.contains(&want) {
        return Err(format!("/readyz answered {readyz}: {body}"));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Bytes go both ways, unchanged.
    #[tokio::test]
    async fn relays_both_ways() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let target = echo.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let port = crate::ports::free().expect("a port");
        let forwarder = Forwarder::start(port, target).await.expect("forwarder");
        let mut s = TcpStream::connect(forwarder.address())
            .await
            .expect("connect");
        s.write_all(b"hello").await.expect("write");
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"hello");
    }
}
