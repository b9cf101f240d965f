//! The broker's in-memory state guards its own invariants (docs/ARCHITECTURE.md,
//! "in `LocalBroker` every transition moves a message through one pair of
//! primitives"): checked on the source, so that a change that reaches into
//! a part from outside its module fails here, not in production.
//!
//! - The parts of the state (the ready set, the commit groups, the
//!   horizon, flow control's memory, the in-memory index of messages, the
//!   timers, the waiters) declare no `pub` field: their invariants are kept
//!   by their own methods.
//! - The composites (`State`, `QueueState`) have `pub` fields only of part
//!   types, and no other module assigns to them.
//! - Only `state.rs` (the primitives) and `flow.rs` (a key's head moving
//!   between the ready set and its parked messages) change a ready set.

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read(file: &str) -> String {
    std::fs::read_to_string(src().join(file)).unwrap_or_else(|e| panic!("read src/{file}: {e}"))
}

/// The body of `struct NAME { ... }` in `text` (of a tuple struct, what
/// is between its parentheses).
fn struct_body<'t>(text: &'t str, name: &str) -> &'t str {
    if let Some(start) = text.find(&format!("struct {name}(")) {
        let open = start + text[start..].find('(').expect("a parenthesis");
        let close = open + text[open..].find(");").expect("a closing parenthesis");
        return &text[open + 1..close];
    }
    let start = text
        .find(&format!("struct {name} {{"))
        .or_else(|| text.find(&format!("struct {name}<")))
        .unwrap_or_else(|| panic!("struct {name} not found"));
    let open = start + text[start..].find('{').expect("a brace");
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    panic!("struct {name} not closed")
}

/// The `pub` fields of a struct body, as (name, type); a tuple struct's
/// `pub` field is named by its index.
fn pub_fields(body: &str) -> Vec<(String, String)> {
    if !body.contains('\n') {
        return body
            .split(',')
            .enumerate()
            .filter(|(_, field)| field.trim_start().starts_with("pub"))
            .map(|(i, field)| (i.to_string(), field.trim().to_string()))
            .collect();
    }
    body.lines()
        .map(str::trim)
        .filter_map(|line| {
            line.strip_prefix("pub ")
                .or(line.strip_prefix("pub(crate) "))
        })
        .filter_map(|field| {
            let (name, ty) = field.split_once(':')?;
            Some((
                name.trim().to_string(),
                ty.trim().trim_end_matches(',').to_string(),
            ))
        })
        .collect()
}

/// Every `.rs` file under `src/` but `except`, with its text.
fn other_files(except: &[&str]) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path
                    .strip_prefix(src())
                    .expect("under src")
                    .to_string_lossy()
                    .into_owned();
                if !except.contains(&name.as_str()) {
                    let text = std::fs::read_to_string(&path).expect("read");
                    files.push((name, text));
                }
            }
        }
    }
    files
}

#[test]
fn state_parts_have_no_pub_fields() {
    let parts = [
        ("state.rs", "ReadySet"),
        ("state.rs", "Messages"),
        ("group.rs", "Groups"),
        ("driver.rs", "Horizon"),
        ("flow.rs", "FlowMem"),
        ("flow.rs", "KeyMem"),
        ("flow.rs", "Flows"),
        ("timers.rs", "Timers"),
        ("waiters.rs", "Waiters"),
        ("bounded_map.rs", "BoundedMap"),
        ("replace.rs", "Successors"),
    ];
    for (file, part) in parts {
        let fields = pub_fields(struct_body(&read(file), part));
        assert!(
            fields.is_empty(),
            "{part} ({file}) has pub fields {fields:?}: a part keeps its invariants behind its methods"
        );
    }
}

#[test]
fn composites_expose_only_parts_and_nobody_assigns_them() {
    let state = read("state.rs");
    let part_types = [
        "Messages",
        "ReadySet",
        "BoundedMap<ScheduleId, ArmedSchedule>",
        "FlowMem",
        "BTreeMap<QueueName, QueueState>",
        "Timers<TimerTarget>",
        "Horizon",
        "Groups",
        "Waiters",
        "Flows",
        "crate::replace::Successors",
    ];
    let mut names = Vec::new();
    for composite in ["State", "QueueState"] {
        for (name, ty) in pub_fields(struct_body(&state, composite)) {
            assert!(
                part_types.contains(&ty.as_str()),
                "{composite}.{name}: {ty} is not a part (its fields would be written from anywhere)"
            );
            names.push(name);
        }
    }
    assert!(
        names.len() >= 8,
        "found only {names:?}: the parser lost fields"
    );
    // The modules that see the state (the others have fields of their own
    // by the same names).
    let sees_state = other_files(&["state.rs"])
        .into_iter()
        .filter(|(_, text)| text.contains("crate::state::"));
    for (file, text) in sees_state {
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for name in &names {
                let field = format!(".{name}");
                let assigned = code.match_indices(&field).any(|(at, _)| {
                    let rest = &code[at + field.len()..];
                    let whole_name = !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_');
                    let rest = rest.trim_start();
                    let assigns = (rest.starts_with('=') && !rest.starts_with("=="))
                        || ["+=", "-=", "*=", "/="]
                            .iter()
                            .any(|op| rest.starts_with(op));
                    // The receivers that name the state or one of its
                    // queues (`info.ready` is a key's count, not a part).
                    let receiver = ["state", "self", "q", "queue"]
                        .iter()
                        .any(|r| code[..at].ends_with(r));
                    whole_name && assigns && receiver
                });
                let taken = code.contains(&format!("&mut q{field})"))
                    || code.contains(&format!("&mut queue{field})"))
                    || code.contains(&format!("&mut self{field})"))
                    || code.contains(&format!("&mut state{field})"));
                assert!(
                    !assigned && !taken,
                    "src/{file}:{}: assigns the state part `{name}` from outside state.rs: {}",
                    number + 1,
                    line.trim()
                );
            }
        }
    }
}

#[test]
fn only_the_primitives_and_flow_change_a_ready_set() {
    for (file, text) in other_files(&["state.rs", "flow.rs"]) {
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            assert!(
                !code.contains(".ready.insert(") && !code.contains(".ready.remove("),
                "src/{file}:{}: changes a ready set outside the primitives: {}",
                number + 1,
                line.trim()
            );
        }
    }
}
