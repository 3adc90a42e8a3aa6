//! Free loopback ports for the processes tests and harnesses start. A port is free when picked;
//! it may be taken before the process binds it, so a start that cannot retry picks it last.

use std::net::TcpListener;

use crate::Error;

/// One free loopback port.
pub fn free() -> Result<u16, Error> {
    let [port] = free_n::<1>()?;
    Ok(port)
}

/// `N` distinct free loopback ports (all held open while picking, so none repeats).
pub fn free_n<const N: usize>() -> Result<[u16; N], Error> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::io("pick free loopback ports"))?;
    let mut ports = [0u16; N];
    for (slot, l) in ports.iter_mut().zip(&listeners) {
        *slot = l
            .local_addr()
            .map_err(Error::io("pick free loopback ports"))?
            .port();
    }
    Ok(ports)
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
}
