//! Server-to-client frames: reply lines, job frames and YAML documents, as
//! beanstalkd writes them byte for byte.

/// Appends `line` and `\r\n`.
pub(crate) fn line(out: &mut Vec<u8>, line: &str) {
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `<WORD> <id> <bytes>\r\n<data>\r\n` (`RESERVED`, `FOUND`).
pub(crate) fn job(out: &mut Vec<u8>, word: &str, id: u64, body: &[u8]) {
    line(out, &format!("{word} {id} {}", body.len()));
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

/// `OK <bytes>\r\n<yaml>\r\n`; `yaml` starts with `---\n`.
pub(crate) fn yaml(out: &mut Vec<u8>, yaml: &str) {
    line(out, &format!("OK {}", yaml.len()));
    out.extend_from_slice(yaml.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A YAML list of names, as `list-tubes` and `list-tubes-watched` send it.
pub(crate) fn name_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut doc = String::from("---\n");
    for name in names {
        doc.push_str("- ");
        doc.push_str(name);
        doc.push('\n');
    }
    doc
}

/// Builds a YAML dictionary of scalars in a fixed key order.
#[derive(Default)]
pub(crate) struct YamlDict(String);

impl YamlDict {
    pub(crate) fn new() -> Self {
        Self(String::from("---\n"))
    }

    /// An unquoted scalar (numbers, booleans, states).
    pub(crate) fn raw(mut self, key: &str, value: impl std::fmt::Display) -> Self {
        use std::fmt::Write;
        // Writing to a String cannot fail.
        let _ = writeln!(self.0, "{key}: {value}");
        self
    }

    /// A double-quoted string (beanstalkd quotes names, version, hostname).
    pub(crate) fn quoted(self, key: &str, value: &str) -> Self {
        let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
        self.raw(key, format_args!("\"{escaped}\""))
    }

    pub(crate) fn finish(self) -> String {
        self.0
    }
}
