//! Free loopback ports for the processes tests and harnesses start. A port is free when picked;
//! it may be taken before the process binds it, so a start that cannot retry picks it last.
//!
//! Ports come from below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`): a port
//! the kernel hands out for `bind(0)` is one it also hands out as the source port of outgoing
//! connections, and the tests open thousands of those to their apiservers, so a port picked
//! there was seen taken again before the child bound it. Below the range only another test's
//! pick can take it, and the picks start at a random place.

use std::hash::{BuildHasher, RandomState};
use std::net::TcpListener;

use crate::Error;

/// How many ports below the ephemeral range are used.
const SPAN: u16 = 12_000;

/// One free loopback port.
pub fn free() -> Result<u16, Error> {
    let [port] = free_n::<1>()?;
    Ok(port)
}

/// `N` distinct free loopback ports (all held open while picking, so none repeats).
pub fn free_n<const N: usize>() -> Result<[u16; N], Error> {
    let mut listeners = Vec::with_capacity(N);
    if let Some((low, span)) = below_ephemeral() {
        let start = RandomState::new().hash_one(std::process::id()) as u16 % span;
        for i in 0..span {
            if listeners.len() == N {
                break;
            }
            let port = low + (start + i) % span;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                listeners.push(l);
            }
        }
    }
    // Where the range leaves no room below it (or all of it is taken), the kernel picks.
    while listeners.len() < N {
        listeners
            .push(TcpListener::bind("127.0.0.1:0").map_err(Error::io("pick free loopback ports"))?);
    }
    let mut ports = [0u16; N];
    for (slot, l) in ports.iter_mut().zip(&listeners) {
        *slot = l
            .local_addr()
            .map_err(Error::io("pick free loopback ports"))?
            .port();
    }
    Ok(ports)
}

/// The first port and the number of ports of the span just below the ephemeral range.
fn below_ephemeral() -> Option<(u16, u16)> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let ephemeral_low: u16 = range.split_whitespace().next()?.parse().ok()?;
    let low = ephemeral_low.checked_sub(SPAN)?.max(1024);
    let span = ephemeral_low.checked_sub(low)?;
    (span >= 1024).then_some((low, span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_ports() {
        let [a, b, c] = free_n::<3>().expect("ports");
        assert!(a != b && b != c && a != c, "{a} {b} {c}");
        assert_ne!(free().expect("a port"), 0);
    }

    #[test]
    fn ports_come_from_below_the_ephemeral_range() {
        let Some((low, span)) = below_ephemeral() else {
            return;
        };
        let [a, b] = free_n::<2>().expect("ports");
        for p in [a, b] {
            assert!(
                (low..low + span).contains(&p),
                "{p} not in {low}..{}",
                low + span
            );
        }
    }
}
