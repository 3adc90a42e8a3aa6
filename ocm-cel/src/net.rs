//! The Kubernetes `ip` and `cidr` libraries (apiserver `library/ip.go`, `library/cidr.go`), on
//! `std::net` addresses with Go `net/netip` semantics: no zones, no IPv4-mapped IPv6 addresses,
//! no leading zeros in IPv4 octets.

use std::any::Any;
use std::net::IpAddr;

use cel::common::types::{CelBool, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

static IP_TYPE: Type = Type::new_unspecified_type("net.IP");
static CIDR_TYPE: Type = Type::new_unspecified_type("net.CIDR");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ip(IpAddr);

/// A prefix as written: `cidr('10.0.0.1/8').ip()` keeps the host bits, `masked()` drops them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cidr {
    addr: IpAddr,
    bits: u8,
}

/// `netip.ParseAddr` plus the Kubernetes restrictions.
fn parse_ip(s: &str) -> Result<IpAddr, String> {
    // Rust's parser accepts neither zones nor IPv4 octets with leading zeros, like Go's.
    let addr: IpAddr = s
        .parse()
        .map_err(|_| format!("IP Address {s:?} parse error during conversion from string: ParseAddr({s:?}): unable to parse IP"))?;
    if let IpAddr::V6(v6) = addr
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
    }
    Ok(addr)
}

/// `netip.ParsePrefix` plus the Kubernetes restrictions. Host bits may be set.
fn parse_cidr(s: &str) -> Result<Cidr, String> {
    let invalid = || {
        format!(
            "network address parse error during conversion from string: netip.ParsePrefix({s:?}): invalid prefix"
        )
    };
    let (addr, bits) = s.rsplit_once('/').ok_or_else(invalid)?;
    // Go accepts only plain decimal digits, and no leading zero.
    if bits.is_empty()
        || !bits.bytes().all(|b| b.is_ascii_digit())
        || (bits.len() > 1 && bits.starts_with('0'))
    {
        return Err(invalid());
    }
    let addr = parse_ip(addr).map_err(|_| invalid())?;
    let bits: u8 = bits.parse().map_err(|_| invalid())?;
    if bits > max_bits(addr) {
        return Err(invalid());
    }
    Ok(Cidr { addr, bits })
}

fn max_bits(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// The address as a 128-bit number, left-aligned so that prefix bits compare the same way for
/// both families.
fn bits_of(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn mask(bits: u8) -> u128 {
    if bits == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(bits))
    }
}

impl Cidr {
    /// `netip.Prefix.Contains`: same family and the same first `bits` bits.
    fn contains(&self, ip: IpAddr) -> bool {
        self.addr.is_ipv4() == ip.is_ipv4()
            && (bits_of(self.addr) ^ bits_of(ip)) & mask(self.bits) == 0
    }

    /// `containsCIDR`: `Overlaps` and no longer prefix than `other`.
    fn contains_cidr(&self, other: &Cidr) -> bool {
        self.bits <= other.bits && self.contains(other.addr)
    }

    fn masked(&self) -> Cidr {
        let bits = bits_of(self.addr) & mask(self.bits);
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::from(((bits >> 96) as u32).to_be_bytes()),
            IpAddr::V6(_) => IpAddr::from(bits.to_be_bytes()),
        };
        Cidr {
            addr,
            bits: self.bits,
        }
    }
}

macro_rules! static_val {
    ($ty:ty, $cel_type:expr) => {
        impl Val for $ty {
            fn get_type(&self) -> &Type {
                &$cel_type
            }
            fn cel_type() -> &'static Type {
                &$cel_type
            }
            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$ty>().is_some_and(|o| o == self)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(*self)
            }
            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
        }
        impl StaticVal for $ty {}
    };
}
static_val!(Ip, IP_TYPE);
static_val!(Cidr, CIDR_TYPE);

fn error(function: &str) -> impl Fn(String) -> ExecutionError + '_ {
    move |message| ExecutionError::function_error(function, message)
}

fn ip(s: &CelString<'_>) -> Result<Ip, ExecutionError> {
    parse_ip(s.inner()).map(Ip).map_err(error("ip"))
}
fn is_ip(s: &CelString<'_>) -> CelBool {
    parse_ip(s.inner()).is_ok().into()
}
/// Go's `Addr.String()` and Rust's `Display` both print RFC 5952 form.
fn is_canonical(s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let addr = parse_ip(s.inner()).map_err(error("ip.isCanonical"))?;
    Ok((addr.to_string() == s.inner()).into())
}
fn ip_to_string(ip: &Ip) -> CelString<'static> {
    ip.0.to_string().into()
}
fn family(ip: &Ip) -> CelInt {
    CelInt::from(if ip.0.is_ipv4() { 4 } else { 6 })
}
fn is_unspecified(ip: &Ip) -> CelBool {
    ip.0.is_unspecified().into()
}
fn is_loopback(ip: &Ip) -> CelBool {
    ip.0.is_loopback().into()
}
/// 224.0.0.0/24 and ff02::/16 (Go's test is on `ff0X:` with X = 2).
fn is_link_local_multicast(ip: &Ip) -> CelBool {
    match ip.0 {
        IpAddr::V4(v4) => matches!(v4.octets(), [224, 0, 0, _]),
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
    .into()
}
/// 169.254.0.0/16 and fe80::/10.
fn is_link_local_unicast(ip: &Ip) -> CelBool {
    match ip.0 {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
    .into()
}
/// Go's rule: not unspecified, loopback, multicast, link-local unicast or the IPv4 broadcast
/// address. Private addresses count as global unicast.
fn is_global_unicast(ip: &Ip) -> CelBool {
    let special = match ip.0 {
        IpAddr::V4(v4) => v4.is_broadcast() || v4.is_multicast() || v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_multicast() || v6.segments()[0] & 0xffc0 == 0xfe80,
    };
    (!special && !ip.0.is_unspecified() && !ip.0.is_loopback()).into()
}

fn cidr(s: &CelString<'_>) -> Result<Cidr, ExecutionError> {
    parse_cidr(s.inner()).map_err(error("cidr"))
}
fn is_cidr(s: &CelString<'_>) -> CelBool {
    parse_cidr(s.inner()).is_ok().into()
}
fn cidr_to_string(c: &Cidr) -> CelString<'static> {
    format!("{}/{}", c.addr, c.bits).into()
}
fn contains_ip(c: &Cidr, ip: &Ip) -> CelBool {
    c.contains(ip.0).into()
}
fn contains_ip_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let addr = parse_ip(s.inner()).map_err(error("containsIP"))?;
    Ok(c.contains(addr).into())
}
fn contains_cidr(c: &Cidr, other: &Cidr) -> CelBool {
    c.contains_cidr(other).into()
}
fn contains_cidr_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let other = parse_cidr(s.inner()).map_err(error("containsCIDR"))?;
    Ok(c.contains_cidr(&other).into())
}
fn cidr_ip(c: &Cidr) -> Ip {
    Ip(c.addr)
}
fn masked(c: &Cidr) -> Cidr {
    c.masked()
}
fn prefix_length(c: &Cidr) -> CelInt {
    CelInt::from(i64::from(c.bits))
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(IP_TYPE.to_owned())?;
    env.add_type(CIDR_TYPE.to_owned())?;
    cel::add_overload!(env, fn ip: (CelString<'_>) -> Result<Ip>, id = "string_to_ip")?;
    cel::add_overload!(env, fn is_ip: (CelString<'_>) -> CelBool, name = "isIP", id = "is_ip")?;
    cel::add_overload!(env, fn is_canonical: (CelString<'_>) -> Result<CelBool>,
        name = "ip.isCanonical", id = "ip_is_canonical")?;
    cel::add_overload!(env, fn ip_to_string: (Ip) -> CelString<'static>, name = "string",
        id = "ip_to_string")?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt, id = "ip_family")?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool, id = "ip_is_unspecified")?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool, id = "ip_is_loopback")?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool,
        id = "ip_is_link_local_multicast")?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool,
        id = "ip_is_link_local_unicast")?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool,
        id = "ip_is_global_unicast")?;
    cel::add_overload!(env, fn cidr: (CelString<'_>) -> Result<Cidr>, id = "string_to_cidr")?;
    cel::add_overload!(env, fn is_cidr: (CelString<'_>) -> CelBool, name = "isCIDR", id = "is_cidr")?;
    cel::add_overload!(env, fn cidr_to_string: (Cidr) -> CelString<'static>, name = "string",
        id = "cidr_to_string")?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool, name = "containsIP",
        id = "cidr_contains_ip_ip")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString<'_>) -> Result<CelBool>,
        name = "containsIP", id = "cidr_contains_ip_string")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool,
        name = "containsCIDR", id = "cidr_contains_cidr")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString<'_>) -> Result<CelBool>,
        name = "containsCIDR", id = "cidr_contains_cidr_string")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip", id = "cidr_ip")?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr, id = "cidr_masked")?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt, id = "cidr_prefix_length")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_netip_with_kubernetes_rules() {
        for ok in ["127.0.0.1", "::1", "2001:db8::abcd", "::1.2.3.4"] {
            assert!(parse_ip(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.256",
            ":::1",
            "01.2.3.4",
            "::ffff:1.2.3.4",
            "fe80::1%eth0",
            "",
        ] {
            assert!(parse_ip(bad).is_err(), "{bad}");
        }
        for ok in ["192.168.0.0/16", "::1/128", "192.168.0.1/24", "0.0.0.0/0"] {
            assert!(parse_cidr(ok).is_ok(), "{ok}");
        }
        for bad in [
            "192.168.0.0/33",
            "::1/129",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            "10.0.0.0",
            "::ffff:1.2.3.4/120",
        ] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixes_contain_and_mask() {
        let c = parse_cidr("192.168.0.1/24").unwrap();
        assert!(c.contains(parse_ip("192.168.0.200").unwrap()));
        assert!(!c.contains(parse_ip("192.168.1.1").unwrap()));
        assert!(!c.contains(parse_ip("::1").unwrap()));
        assert_eq!(c.masked(), parse_cidr("192.168.0.0/24").unwrap());
        assert!(
            parse_cidr("10.0.0.0/8")
                .unwrap()
                .contains_cidr(&parse_cidr("10.1.0.0/16").unwrap())
        );
        assert!(
            !parse_cidr("10.1.0.0/16")
                .unwrap()
                .contains_cidr(&parse_cidr("10.0.0.0/8").unwrap())
        );
        assert!(
            parse_cidr("::/0")
                .unwrap()
                .contains(parse_ip("2001:db8::1").unwrap())
        );
    }
}
