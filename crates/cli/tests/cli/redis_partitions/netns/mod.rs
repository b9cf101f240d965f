//! Network namespaces for partition tests: one for Redis (`R`) and one per
//! delayd node (`A`, `B`), each node linked to Redis by its own veth pair
//! and to the test (the root namespace, where the clients run) by another.
//! Every address is in `10.<o>.0.0/16`, `o` derived from the process id,
//! on interfaces this module creates; dropping [`Net`] deletes the
//! namespaces, and with them every interface and the processes' network.
//!
//! ```text
//!   test (root) 10.o.3.1 ── 10.o.3.2 A 10.o.1.2 ── 10.o.1.1 ┐
//!                                                            R (Redis :7000)
//!   test (root) 10.o.4.1 ── 10.o.4.2 B 10.o.2.2 ── 10.o.2.1 ┘
//! ```

use std::process::{Command, Stdio};

pub const REDIS_PORT: u16 = 7000;
pub const HTTP_PORT: u16 = 7070;

pub struct Net {
    pid: u32,
    octet: u32,
    namespaces: Vec<String>,
}

/// Runs `ip ARGS`; its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Net {
    /// Creates the namespaces and links, or says why it cannot (not root,
    /// no `ip`, namespaces not permitted): the caller then fails with it.
    pub fn create() -> Result<Net, String> {
        let pid = std::process::id();
        let mut net = Net {
            pid,
            octet: 100 + pid % 100,
            namespaces: Vec::new(),
        };
        for role in ["R", "A", "B"] {
            let ns = net.ns(role);
            let _ = ip(&["netns", "del", &ns]); // a stale one of a reused pid
            ip(&["netns", "add", &ns])?;
            net.namespaces.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        net.veth(("R", "ra", 1, 1), ("A", "ar", 1, 2))?;
        net.veth(("R", "rb", 2, 1), ("B", "br", 2, 2))?;
        net.veth(("", "ca", 3, 1), ("A", "ac", 3, 2))?;
        net.veth(("", "cb", 4, 1), ("B", "bc", 4, 2))?;
        Ok(net)
    }

    /// The namespace of `role` (`R`, `A`, `B`).
    pub fn ns(&self, role: &str) -> String {
        format!("dly{role}{}", self.pid)
    }

    pub fn dev(&self, name: &str) -> String {
        format!("{name}{}", self.pid)
    }

    pub fn addr(&self, subnet: u32, host: u32) -> String {
        format!("10.{}.{subnet}.{host}", self.octet)
    }

    /// One veth pair; each end `(role, name, subnet, host)`, role "" being
    /// the root namespace.
    fn veth(&self, a: (&str, &str, u32, u32), b: (&str, &str, u32, u32)) -> Result<(), String> {
        let (dev_a, dev_b) = (self.dev(a.1), self.dev(b.1));
        ip(&[
            "link", "add", &dev_a, "type", "veth", "peer", "name", &dev_b,
        ])?;
        for (role, dev, subnet, host) in [(a.0, &dev_a, a.2, a.3), (b.0, &dev_b, b.2, b.3)] {
            let ns = self.ns(role);
            let mut prefix: Vec<&str> = Vec::new();
            if !role.is_empty() {
                ip(&["link", "set", dev, "netns", &ns])?;
                prefix = vec!["-n", &ns];
            }
            let cidr = format!("{}/24", self.addr(subnet, host));
            let add = [&prefix[..], &["addr", "add", &cidr, "dev", dev]].concat();
            ip(&add)?;
            let up = [&prefix[..], &["link", "set", dev, "up"]].concat();
            ip(&up)?;
        }
        Ok(())
    }

    /// `program` run inside `role`'s namespace (`ip netns exec` execs it,
    /// so the child is the program itself).
    pub fn command(&self, role: &str, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns(role), program]);
        command
    }

    /// Takes Redis's end of `node`'s link down (`up`: back up): packets
    /// between them vanish silently, as with a pulled cable; nothing is
    /// reset, so open connections just stop answering.
    pub fn set_redis_link(&self, node: &str, up: bool) {
        let dev = self.dev(if node == "A" { "ra" } else { "rb" });
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.ns("R"), "link", "set", &dev, state]).expect("link set");
    }

    /// Slows `node`'s link to Redis both ways to `rate` (a token bucket:
    /// this kernel has no netem), or removes that when `rate` is `None`.
    pub fn slow_redis_link(&self, node: &str, rate: Option<&str>) {
        let (lower, ours) = if node == "A" {
            ("a", "ra")
        } else {
            ("b", "rb")
        };
        let theirs = format!("{lower}r");
        for (role, dev) in [("R", ours), (node, theirs.as_str())] {
            let ns = self.ns(role);
            let dev = self.dev(dev);
            let mut tc = Command::new("ip");
            tc.args(["netns", "exec", &ns, "tc", "qdisc"]);
            match rate {
                Some(rate) => tc
                    .args(["add", "dev", &dev, "root", "tbf", "rate", rate])
                    .args(["burst", "2kb", "latency", "2s"]),
                None => tc.args(["del", "dev", &dev, "root"]),
            };
            let status = tc.stdout(Stdio::null()).status().expect("tc");
            assert!(status.success(), "tc on {dev} in {ns} failed");
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes its interfaces, and a veth's peer in
        // the root namespace with it.
        for ns in &self.namespaces {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}
