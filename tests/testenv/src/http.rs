//! Plain HTTP/1.0 on loopback: how tests and harnesses read the `/metrics` and probes of the
//! processes they start, and call etcd's JSON gateway (no client stack needed for a local,
//! plain-text answer).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr`: the status code and the body, or why not (within 10 s).
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    request(addr, "GET", path, "").await
}

/// `POST path` with a JSON `body` on `addr`: the status code and the body (within 10 s).
pub async fn post_json(addr: SocketAddr, path: &str, body: &str) -> Result<(u16, String), String> {
    request(addr, "POST", path, body).await
}

async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let head = if body.is_empty() {
            format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        } else {
            format!(
                "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        s.write_all(head.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| format!("{method} {path} on {addr}: timed out"))?
        .map_err(|e| format!("{method} {path} on {addr}: {e}"))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path} on {addr}: no HTTP response"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path} on {addr}: bad status line"))?;
    Ok((status, body.to_owned()))
}
