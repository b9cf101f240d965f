//! The crate map's dependency rules, checked against `cargo metadata`: a
//! dependency between workspace crates that the table below does not allow
//! fails the build, and so does any cycle, dev-dependencies included.
//!
//! Why these rules: the wheel and core are pure libraries every other crate
//! builds on; the two stores are interchangeable behind `Broker`, so neither
//! may know the other or any frontend; frontends speak to a `Broker`, never
//! to a store, so any store can sit behind them (their tests may use a real
//! store); the dashboard's assets need nothing of ours; the client is
//! usable without the server; only the `delayd` binary, which owns the
//! process, ties a store to the frontends.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// One row of the crate map: the workspace crates `package` may depend on.
/// `normal` covers `[dependencies]` and `[build-dependencies]`; `dev` covers
/// `[dev-dependencies]` (what tests, benches and examples may use) and is
/// checked separately, so a store allowed in tests is still refused in
/// `normal`. `ANY` allows every workspace crate.
struct Rule {
    package: &'static str,
    normal: &'static [&'static str],
    dev: &'static [&'static str],
}

const ANY: &[&str] = &["*"];
const WHEEL: &str = "delayd-wheel";
const CORE: &str = "delayd-core";
/// The shared HTTP wire types.
const API: &str = "delayd-api";
const LOCAL: &str = "delayd-local";
const REDIS: &str = "delayd-redis";
const PUSH: &str = "delayd-push";
const UI: &str = "delayd-ui";
const SERVER: &str = "delayd-server";
/// The fault tests' history checker: plain data, no workspace crate.
const HISTORY: &str = "delayd-history";

#[rustfmt::skip]
const RULES: &[Rule] = &[
    // package                               normal (+ build)            dev (tests)
    Rule { package: WHEEL,                   normal: &[],                dev: &[] },
    Rule { package: CORE,                    normal: &[WHEEL],           dev: &[WHEEL] },
    // The wire is independent of core: conversions live in the server and
    // the client's broker adapter, so the client can use it without core.
    Rule { package: API,                     normal: &[],                dev: &[] },
    Rule { package: LOCAL,                   normal: &[CORE, WHEEL],     dev: &[CORE, WHEEL, HISTORY] },
    Rule { package: REDIS,                   normal: &[CORE, WHEEL],     dev: &[CORE, WHEEL, HISTORY] },
    // Its fault tests record histories for it; it knows nothing of ours.
    Rule { package: HISTORY,                 normal: &[],                dev: &[] },
    Rule { package: "delayd-beanstalk",      normal: &[CORE, API],       dev: &[CORE, API, LOCAL, REDIS] },
    Rule { package: PUSH,                    normal: &[CORE, API],       dev: &[CORE, API, LOCAL, REDIS] },
    // The server checks push targets with push's allowlist and serves the
    // dashboard's assets.
    Rule { package: SERVER,                  normal: &[CORE, API, PUSH, UI], dev: &[CORE, API, PUSH, UI, LOCAL, REDIS] },
    Rule { package: UI,                      normal: &[],                dev: &[] },
    // Core only behind the `broker` feature (see the test below); the
    // tests run the conformance suite through a real server.
    Rule { package: "delayd-client",         normal: &[CORE, API],       dev: &[CORE, API, SERVER, LOCAL] },
    Rule { package: "delayd",                normal: ANY,                dev: ANY },
];

/// A dependency of one workspace crate on another.
#[derive(Debug)]
struct Edge {
    from: String,
    to: String,
    /// `normal`, `build` or `dev`.
    kind: String,
    optional: bool,
}

/// Every dependency between workspace crates, from `cargo metadata`.
fn workspace_edges() -> Vec<Edge> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut edges = Vec::new();
    for package in packages {
        let from = package["name"].as_str().expect("package name");
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let to = dep["name"].as_str().expect("dependency name");
            // A crate may name itself as a dev-dependency to turn on its
            // own test features; that is no edge.
            if members.contains(to) && to != from {
                edges.push(Edge {
                    from: from.to_owned(),
                    to: to.to_owned(),
                    kind: dep["kind"].as_str().unwrap_or("normal").to_owned(),
                    optional: dep["optional"].as_bool().unwrap_or(false),
                });
            }
        }
    }
    edges
}

fn allowed(edge: &Edge) -> Result<bool, String> {
    let rule = RULES
        .iter()
        .find(|r| r.package == edge.from)
        .ok_or_else(|| format!("{} has no row in RULES: add one", edge.from))?;
    let list = if edge.kind == "dev" {
        rule.dev
    } else {
        rule.normal
    };
    Ok(list == ANY || list.contains(&edge.to.as_str()))
}

#[test]
fn every_dependency_between_workspace_crates_is_allowed() {
    let edges = workspace_edges();
    assert!(
        edges.iter().any(|e| e.from == "delayd"),
        "no edges found: {edges:?}"
    );
    let mut refused = Vec::new();
    for edge in &edges {
        match allowed(edge) {
            Ok(true) => {}
            Ok(false) => refused.push(format!("{} -> {} ({})", edge.from, edge.to, edge.kind)),
            Err(missing) => refused.push(missing),
        }
    }
    assert!(
        refused.is_empty(),
        "dependencies the crate map forbids:\n  {}",
        refused.join("\n  ")
    );
}

#[test]
fn client_depends_on_core_only_behind_a_feature() {
    for edge in workspace_edges() {
        if edge.from == "delayd-client" && edge.to == CORE && edge.kind != "dev" {
            assert!(
                edge.optional,
                "delayd-client -> delayd-core must be optional"
            );
        }
    }
}

#[test]
fn no_cycle_even_through_dev_dependencies() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for edge in workspace_edges() {
        graph.entry(edge.from).or_default().insert(edge.to);
    }
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        let mut path = Vec::new();
        if let Some(cycle) = find_cycle(&graph, start, &mut path, &mut done) {
            panic!("dependency cycle: {}", cycle.join(" -> "));
        }
    }
}

/// Depth-first search; `path` is the current chain, `done` the crates
/// already known to reach no cycle.
fn find_cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| n == node) {
        let mut cycle = path[at..].to_vec();
        cycle.push(node.to_owned());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_owned());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(cycle) = find_cycle(graph, next, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(node.to_owned());
    None
}
