//! Which push targets delayd may call (`--push-allow`).
//!
//! # The rule
//! Nothing is allowed by default. Each allowlist entry is either
//! - a CIDR (`10.1.0.0/16`, `::1/128`) or a bare IP address (a /32 or /128), or
//! - a host pattern: an exact name (`example.com`, `localhost`) or a
//!   wildcard `*.example.com`, which matches every name *below*
//!   `example.com` (any depth) but not `example.com` itself.
//!
//! A push URL is accepted at configuration time ([`PushPolicy::check_url`])
//! when its scheme is `http` or `https` and its host is an IP literal inside
//! a CIDR entry, or a name matching a host pattern.
//!
//! At delivery ([`PushPolicy::check_resolved`], and the HTTP client's
//! resolver, which applies the same check) every address the name resolves
//! to is checked again: an address inside a CIDR entry is allowed; any other
//! address is allowed only if it is *public*, i.e. not loopback, private
//! (RFC 1918, IPv6 ULA), link-local, CGNAT shared space, unspecified,
//! multicast, broadcast or documentation space. So a host pattern never
//! opens internal addresses by itself: to push to `http://localhost:8080`
//! list both `localhost` and `127.0.0.0/8` (and `::1/128` if the name also
//! resolves to it). Disallowed addresses are dropped; when none is left the
//! delivery attempt fails. The client connects only to the checked
//! addresses, so a DNS answer that changes between check and connect
//! (rebinding) cannot reach an unchecked address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use reqwest::Url;

/// Why a push target is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// An allowlist entry that is neither a CIDR nor a host pattern.
    #[error("invalid --push-allow entry {entry:?}: {reason}")]
    InvalidEntry { entry: String, reason: &'static str },
    /// The URL does not parse or has no host.
    #[error("invalid push url {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// Only `http` and `https` are pushed to.
    #[error("push url scheme {0:?} is not allowed (only http and https)")]
    Scheme(String),
    /// The host is not on the allowlist (`--push-allow`).
    #[error("push target host {0:?} is not allowed by --push-allow")]
    HostNotAllowed(String),
    /// The name resolved only to addresses the allowlist refuses.
    #[error("push target {host:?} resolved only to disallowed addresses {addrs:?}")]
    AddressNotAllowed { host: String, addrs: Vec<IpAddr> },
    /// DNS resolution failed or gave no address.
    #[error("push target {host:?} did not resolve: {reason}")]
    Resolve { host: String, reason: String },
}

/// A host pattern entry, lowercased, without a trailing dot.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    /// `*.suffix`: stored as `.suffix`.
    Below(String),
}

impl HostPattern {
    fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(name) => name == host,
            Self::Below(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
        }
    }
}

/// The push target allowlist; see the module docs for the exact rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushPolicy {
    networks: Vec<IpNet>,
    hosts: Vec<HostPattern>,
}

impl PushPolicy {
    /// Builds the policy from `--push-allow` entries (CIDRs, IP addresses,
    /// host names, `*.domain` wildcards).
    pub fn new(entries: &[String]) -> Result<Self, PolicyError> {
        let mut policy = Self::default();
        for entry in entries {
            policy.add(entry)?;
        }
        Ok(policy)
    }

    /// Whether the allowlist is empty (then every push target is refused).
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty() && self.hosts.is_empty()
    }

    fn add(&mut self, entry: &str) -> Result<(), PolicyError> {
        let trimmed = entry.trim();
        let invalid = |reason| PolicyError::InvalidEntry {
            entry: entry.to_owned(),
            reason,
        };
        if let Ok(net) = trimmed.parse::<IpNet>() {
            self.networks.push(net.trunc());
        } else if let Ok(ip) = trimmed.parse::<IpAddr>() {
            self.networks.push(IpNet::from(ip));
        } else if trimmed.contains('/') {
            return Err(invalid("not a valid CIDR"));
        } else if let Some(suffix) = trimmed.strip_prefix("*.") {
            let suffix = normalize_name(suffix).ok_or_else(|| invalid("not a valid domain"))?;
            self.hosts.push(HostPattern::Below(format!(".{suffix}")));
        } else {
            let name = normalize_name(trimmed).ok_or_else(|| invalid("not a valid host name"))?;
            self.hosts.push(HostPattern::Exact(name));
        }
        Ok(())
    }

    /// Checks a push URL as configured (`PUT /v1/queues`: a refusal is 400
    /// `invalid_argument`): scheme http/https, host allowed by name or, for
    /// an IP literal, by a CIDR entry. Does not resolve names.
    pub fn check_url(&self, url: &str) -> Result<(), PolicyError> {
        let parsed = parse_url(url)?;
        match target_host(&parsed, url)? {
            Target::Ip(ip) if self.network_allows(ip) => Ok(()),
            Target::Ip(ip) => Err(PolicyError::HostNotAllowed(ip.to_string())),
            Target::Name(name) => self.check_name(&name),
        }
    }

    /// Checks a host name against the host patterns.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), PolicyError> {
        let normalized = normalize_name(name);
        match normalized {
            Some(n) if self.hosts.iter().any(|p| p.matches(&n)) => Ok(()),
            _ => Err(PolicyError::HostNotAllowed(name.to_owned())),
        }
    }

    /// [`check_url`](Self::check_url), then resolves the host and returns
    /// the allowed addresses (with the URL's port). Fails when none is
    /// allowed. Delivery does this inside the HTTP client's resolver, so the
    /// client connects to exactly these addresses.
    pub async fn check_resolved(&self, url: &str) -> Result<Vec<SocketAddr>, PolicyError> {
        self.check_url(url)?;
        let parsed = parse_url(url)?;
        let port = parsed.port_or_known_default().unwrap_or(80);
        match target_host(&parsed, url)? {
            // An IP literal is not resolved; check_url has checked it.
            Target::Ip(ip) => Ok(vec![SocketAddr::new(ip, port)]),
            Target::Name(name) => self.resolve_checked(&name, port).await,
        }
    }

    /// Resolves `name` (already allowed by a host pattern) and keeps only
    /// the addresses the policy allows.
    pub(crate) async fn resolve_checked(
        &self,
        name: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, PolicyError> {
        self.check_name(name)?;
        let resolve_error = |reason: String| PolicyError::Resolve {
            host: name.to_owned(),
            reason,
        };
        let resolved: Vec<SocketAddr> = tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| resolve_error(e.to_string()))?
            .collect();
        if resolved.is_empty() {
            return Err(resolve_error("no addresses".into()));
        }
        self.filter_addresses(name, resolved)
    }

    /// Keeps the addresses the policy allows for a name matched by a host
    /// pattern; an error naming the refused ones when none is left.
    pub(crate) fn filter_addresses(
        &self,
        host: &str,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, PolicyError> {
        let (allowed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs
            .into_iter()
            .partition(|addr| self.address_allowed(addr.ip()));
        if allowed.is_empty() {
            return Err(PolicyError::AddressNotAllowed {
                host: host.to_owned(),
                addrs: refused.iter().map(SocketAddr::ip).collect(),
            });
        }
        Ok(allowed)
    }

    /// A resolved address: inside a CIDR entry, or public.
    fn address_allowed(&self, ip: IpAddr) -> bool {
        self.network_allows(ip) || is_public(ip)
    }

    fn network_allows(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.networks.iter().any(|net| net.contains(&ip))
    }
}

enum Target {
    Ip(IpAddr),
    Name(String),
}

fn parse_url(url: &str) -> Result<Url, PolicyError> {
    let parsed = Url::parse(url).map_err(|e| PolicyError::InvalidUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        other => Err(PolicyError::Scheme(other.to_owned())),
    }
}

fn target_host(parsed: &Url, url: &str) -> Result<Target, PolicyError> {
    match parsed.host() {
        Some(url::Host::Ipv4(ip)) => Ok(Target::Ip(IpAddr::V4(ip))),
        Some(url::Host::Ipv6(ip)) => Ok(Target::Ip(canonical(IpAddr::V6(ip)))),
        Some(url::Host::Domain(name)) => Ok(Target::Name(name.to_owned())),
        None => Err(PolicyError::InvalidUrl {
            url: url.to_owned(),
            reason: "no host".into(),
        }),
    }
}

/// Lowercases a DNS name and strips one trailing dot; `None` when it is not
/// a plausible name (so a typo in `--push-allow` fails at start-up).
fn normalize_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (!name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)).then_some(name)
}

/// IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are judged as the IPv4
/// address they carry, so they cannot smuggle a private address past a check.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Whether an address is on the public internet (see the module docs).
pub fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    let shared_cgnat = a == 100 && (64..128).contains(&b);
    let this_network = a == 0;
    let reserved = a >= 240;
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || shared_cgnat
        || this_network
        || reserved)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let unique_local = (first & 0xfe00) == 0xfc00;
    let link_local = (first & 0xffc0) == 0xfe80;
    let site_local = (first & 0xffc0) == 0xfec0;
    let documentation = first == 0x2001 && ip.segments()[1] == 0x0db8;
    // NAT64 and 6to4 embed IPv4 addresses; refuse them rather than decode.
    let embeds_v4 = first == 0x0064 || first == 0x2002;
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || unique_local
        || link_local
        || site_local
        || documentation
        || embeds_v4)
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
