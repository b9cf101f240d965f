//! docs/ARCHITECTURE.md names places in the tree; this test keeps the names
//! true. Every `crates/...` path anywhere in the document (in backticks,
//! links or prose) must exist, and in the transition table (the table whose
//! header starts with `| transition |`) every function named after a path
//! must be in that file: `fn <name>` in a Rust file; in a Lua file of the
//! Redis library, `local function <name>(` for a helper named after it,
//! and for the file itself a registration in `crates/redis/src/scripts.rs`
//! (each `lua/<op>.lua` is the library's function `<op>`). Renaming a file
//! or a function without updating the document fails here.

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
}
