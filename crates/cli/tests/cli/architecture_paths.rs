//! docs/ARCHITECTURE.md names places in the tree; this test keeps the names
//! true. Every `crates/...` path anywhere in the document (in backticks,
//! links or prose) must exist, and in the transition table (the table whose
//! header starts with `| transition |`) every function named after a path
//! must be in that file: `fn <name>` in a Rust file; in a Lua file of the
//! Redis library, `local function <name>(` for a helper named after it,
//! and for the file itself a registration in `crates/redis/src/scripts.rs`
//! (each `lua/<op>.lua` is the library's function `<op>`). And every hop
//! `a` → `b` of a cell is a real call: `b` is called in the body of `a` (or
//! of one of the functions listed with `a`, as in `a`, `c` → `b`). Renaming
//! a file or a function, or routing a call through a new function, without
//! updating the document fails here.

use std::path::{Path, PathBuf};

const DOC: &str = "docs/ARCHITECTURE.md";
const LUA_REGISTRY: &str = "crates/redis/src/scripts.rs";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    let path = workspace_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every `crates/...` path in `text`: from `crates/` up to the first
/// character that cannot be part of a path, without trailing punctuation.
fn crate_paths(text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    let mut paths = Vec::new();
    for (start, _) in text.match_indices("crates/") {
        let preceded_by_word = text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if preceded_by_word {
            continue;
        }
        let rest = &text[start..];
        let end = rest.find(|c| !is_path_char(c)).unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches(['.', '/']);
        paths.push(path.to_string());
    }
    paths
}

/// The backticked spans of one line, in order.
fn backticked(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// The rows of the transition table (header and separator left out).
fn transition_rows(doc: &str) -> Vec<&str> {
    let mut lines = doc.lines().skip_while(|l| !l.starts_with("| transition |"));
    assert!(
        lines.next().is_some(),
        "{DOC} has no transition table (a table whose header starts with `| transition |`)"
    );
    lines
        .skip(1) // the |---| separator
        .take_while(|l| l.starts_with('|'))
        .collect()
}

/// A function named in the table: `name` or `Type::name`.
fn function_name(span: &str) -> Option<&str> {
    let name = span.rsplit("::").next()?;
    let is_ident = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    is_ident.then_some(name)
}

/// Whether `source` (the text of `path`) defines `name`.
fn defines(path: &str, source: &str, name: &str) -> bool {
    if path.ends_with(".lua") {
        return source.contains(&format!("local function {name}("));
    }
    source
        .match_indices(&format!("fn {name}"))
        .any(|(at, found)| {
            let before = source[..at].chars().next_back();
            let after = source[at + found.len()..].chars().next();
            before.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_')
                && matches!(after, Some('(' | '<'))
        })
}

/// Each (path, function) pair of the table's cells: a function belongs to
/// the nearest path before it in the same cell. Also the paths of the
/// table's Lua files, which must be registered functions.
fn table_names(rows: &[&str]) -> (Vec<(String, String)>, Vec<String>) {
    let mut pairs = Vec::new();
    let mut lua_files = Vec::new();
    for row in rows {
        for cell in row.split('|') {
            let mut current: Option<&str> = None;
            for span in backticked(cell) {
                if span.starts_with("crates/") {
                    current = Some(span);
                    if span.ends_with(".lua") && !span.ends_with("/common.lua") {
                        lua_files.push(span.to_string());
                    }
                } else if let (Some(path), Some(name)) = (current, function_name(span)) {
                    pairs.push((path.to_string(), name.to_string()));
                }
            }
        }
    }
    (pairs, lua_files)
}

/// One function named in a cell: its file and name.
#[derive(Clone, Debug, PartialEq)]
struct Named {
    path: String,
    name: String,
}

/// The hops of one cell: stages separated by `→`, each stage the
/// functions named in it (after the nearest path before them). Returns
/// (caller stage, callee) pairs: each callee must be called by one of the
/// functions of the stage before it.
fn cell_hops(cell: &str) -> Vec<(Vec<Named>, Named)> {
    let mut current: Option<String> = None;
    let mut stages: Vec<Vec<Named>> = Vec::new();
    for stage in cell.split('→') {
        let mut names = Vec::new();
        for span in backticked(stage) {
            if span.starts_with("crates/") {
                current = Some(span.to_string());
            } else if let (Some(path), Some(name)) = (&current, function_name(span)) {
                names.push(Named {
                    path: path.clone(),
                    name: name.to_string(),
                });
            }
        }
        stages.push(names);
    }
    let mut hops = Vec::new();
    for pair in stages.windows(2) {
        for callee in &pair[1] {
            hops.push((pair[0].clone(), callee.clone()));
        }
    }
    hops
}

/// The body of `name`'s definition in `source`: a Rust function from its
/// `fn` to the matching closing brace; a Lua `local function` up to the
/// next `end` at the start of a line.
fn body<'a>(path: &str, source: &'a str, name: &str) -> Option<&'a str> {
    if path.ends_with(".lua") {
        let start = source.find(&format!("local function {name}("))?;
        let rest = &source[start..];
        let end = rest.find("\nend").map_or(rest.len(), |e| e + 4);
        return Some(&rest[..end]);
    }
    let start = source
        .match_indices(&format!("fn {name}"))
        .map(|(at, _)| at)
        .find(|&at| defines(path, &source[at..], name))?;
    let rest = &source[start..];
    let open = rest.find('{')?;
    let mut depth = 0usize;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&rest[..open + i + 1]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `body` calls `name`: `name(`, `name::<` or a path to it passed
/// as a function (`Self::name`).
fn calls(body: &str, name: &str) -> bool {
    body.match_indices(name).any(|(at, _)| {
        let before = body[..at].chars().next_back();
        let after = &body[at + name.len()..];
        before.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_')
            && (after.starts_with('(')
                || after.starts_with("::<")
                || (body[..at].ends_with("::")
                    && !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')))
    })
}

#[test]
fn every_hop_in_the_transition_table_is_a_call() {
    let doc = read(DOC);
    let rows = transition_rows(&doc);
    let mut checked = 0;
    let mut stale = Vec::new();
    for row in &rows {
        for cell in row.split('|') {
            for (callers, callee) in cell_hops(cell) {
                checked += 1;
                let called = callers.iter().any(|caller| {
                    let source = read(&caller.path);
                    body(&caller.path, &source, &caller.name)
                        .is_some_and(|b| calls(b, &callee.name))
                });
                if !called {
                    let names: Vec<String> = callers
                        .iter()
                        .map(|c| format!("{} `{}`", c.path, c.name))
                        .collect();
                    stale.push(format!("{} calls no `{}`", names.join(", "), callee.name));
                }
            }
        }
    }
    assert!(
        checked > 15,
        "found only {checked} hops in {DOC}'s transition table"
    );
    assert!(
        stale.is_empty(),
        "{DOC}'s transition table names hops that are no calls: {stale:#?}"
    );
}

#[test]
fn every_crates_path_in_the_architecture_doc_exists() {
    let doc = read(DOC);
    let paths = crate_paths(&doc);
    assert!(
        paths.len() > 40,
        "found only {} crates/ paths in {DOC}",
        paths.len()
    );
    let root = workspace_root();
    let missing: Vec<&String> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "{DOC} names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_function_in_the_transition_table_is_defined_in_its_file() {
    let doc = read(DOC);
    let rows = transition_rows(&doc);
    assert!(
        rows.len() >= 12,
        "the transition table has {} rows",
        rows.len()
    );
    let (pairs, lua_files) = table_names(&rows);
    assert!(
        pairs.len() > 40,
        "found only {} (path, function) pairs",
        pairs.len()
    );
    let mut undefined = Vec::new();
    for (path, name) in &pairs {
        let source = read(path);
        if !defines(path, &source, name) {
            undefined.push(format!("`{name}` in {path}"));
        }
    }
    let registry = read(LUA_REGISTRY);
    for path in &lua_files {
        let op = Path::new(path)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_else(|| panic!("no file name in {path}"));
        if !registry.contains(&format!(", \"{op}\")")) {
            undefined.push(format!("Redis function `{op}` ({path}) in {LUA_REGISTRY}"));
        }
    }
    assert!(
        undefined.is_empty(),
        "{DOC}'s transition table names functions that are not defined: {undefined:#?}"
    );
}

#[test]
fn the_checker_tells_a_definition_from_a_mention() {
    let rust =
        "pub(crate) async fn fire_step(\n    &self) {}\nfn make_ready_now() {}\nfn id<T>() {}";
    assert!(defines("x.rs", rust, "fire_step"));
    assert!(defines("x.rs", rust, "id"));
    assert!(!defines("x.rs", rust, "make_ready"));
    assert!(!defines("x.rs", rust, "step"));
    let lua = "local function promote(c)\n  fail(c)\nend";
    assert!(defines("x.lua", lua, "promote"));
    assert!(!defines("x.lua", lua, "fail"));
    let (pairs, lua_files) = table_names(&[
        "| ack | `crates/a.rs` `ack` → `crates/b.rs` `fail`, `Type::kill` | `crates/redis/lua/ack.lua` (`crates/redis/lua/common.lua` `promote`) |",
    ]);
    let pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(p, n)| (p.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("crates/a.rs", "ack"),
            ("crates/b.rs", "fail"),
            ("crates/b.rs", "kill"),
            ("crates/redis/lua/common.lua", "promote"),
        ]
    );
    assert_eq!(lua_files, ["crates/redis/lua/ack.lua"]);
    assert_eq!(
        crate_paths("see `crates/local/src/fire.rs`, and [x](../crates/core/src/recurring.rs). In crates/wheel."),
        ["crates/local/src/fire.rs", "crates/core/src/recurring.rs", "crates/wheel"]
    );
    let hops =
        cell_hops(" `crates/a.rs` `drive`, `go` → `crates/b.rs` `fire` → `step`, `Type::arm` ");
    let hops: Vec<(Vec<&str>, &str)> = hops
        .iter()
        .map(|(from, to)| {
            (
                from.iter().map(|n| n.name.as_str()).collect(),
                to.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        hops,
        [
            (vec!["drive", "go"], "fire"),
            (vec!["fire"], "step"),
            (vec!["fire"], "arm"),
        ]
    );
    let source = "fn drive(x: u8) -> u8 {\n    if x > 0 { fire(x) } else { 0 }\n}\nfn go() { firestarter(); }\nfn map() { v.iter().map(Self::step) }";
    let drive = body("a.rs", source, "drive").expect("drive's body");
    assert!(drive.ends_with("else { 0 }\n}"), "{drive}");
    assert!(calls(drive, "fire"));
    assert!(!calls(body("a.rs", source, "go").expect("go"), "fire"));
    assert!(calls(body("a.rs", source, "map").expect("map"), "step"));
    let lua = "local function promote(c)\n  fail(c)\nend\nlocal function other()\n  x()\nend";
    assert!(calls(
        body("x.lua", lua, "promote").expect("promote"),
        "fail"
    ));
    assert!(!calls(body("x.lua", lua, "promote").expect("promote"), "x"));
}
