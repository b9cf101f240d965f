//! The message of a 400 `invalid_argument` for a body that is valid JSON of
//! the wrong shape. It names the field by its path in the body
//! (`flow.rate`, `retry.multiplier`, `messages[3].delay_ms`) and says what
//! the field must be in the API's words ("an integer from 0 to
//! 4294967295", "an object"), never in Rust's (`u32`, `struct RateBody`):
//! a client reads the API, not the server's source.
//!
//! serde states a wrong shape as text in a few fixed forms (the default
//! messages of `serde::de::Error`: `invalid type: <got>, expected <what>`,
//! `unknown field`, `missing field`, ...), where `<what>` is the Rust
//! type's own description. [`describe`] rewrites those forms; any other
//! message (a body type's own rule, such as the payload's one-of) is kept,
//! after the path. `serde_path_to_error` supplies the path.

use std::borrow::Cow;
use std::fmt::Display;

use serde_path_to_error::{Path, Segment};

/// The message for serde's `message` about the value at `path`, which lies
/// under `prefix` in the body (`""` for the body itself, `messages[3]` for
/// an item of a batch).
pub fn describe(prefix: &str, path: &Path, message: &str) -> String {
    let place = place(prefix, path);
    let subject = if place.is_empty() {
        "the body"
    } else {
        place.as_str()
    };
    let rewritten = if let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
    {
        // The value may be a string holding ", expected "; the type
        // description after the last one never does.
        rest.rsplit_once(", expected ")
            .map(|(got, expected)| must_be(subject, expected, got_value(got)))
    } else if let Some(rest) = message.strip_prefix("invalid length ") {
        rest.split_once(", expected ").map(|(length, expected)| {
            let got = format!("an array of length {length}");
            must_be(subject, expected, Some(got.into()))
        })
    } else if let Some(rest) = message.strip_prefix("unknown variant ") {
        rest.split_once(", expected ").map(|(variant, expected)| {
            let got = format!("{:?}", variant.trim_matches('`'));
            must_be(subject, expected, Some(got.into()))
        })
    } else if let Some(rest) = message.strip_prefix("unknown field ") {
        unknown_field(&place, path, rest)
    } else if let Some(field) = message.strip_prefix("missing field ") {
        Some(format!(
            "{} is required",
            join(&place, field.trim_matches('`'))
        ))
    } else if let Some(field) = message.strip_prefix("duplicate field ") {
        let field = join(&place, field.trim_matches('`'));
        Some(format!("{field} is given more than once"))
    } else {
        None
    };
    rewritten.unwrap_or_else(|| own_rule(&place, last_key(path), message))
}

/// `flow.rate`, `acks[1].id`, `push.headers["x y"]`: the path under
/// `prefix`, as a client would write it.
fn place(prefix: &str, path: &Path) -> String {
    let mut place = prefix.to_owned();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => place.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                let plain = !key.is_empty()
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if !plain {
                    place.push_str(&format!("[{key:?}]"));
                } else if place.is_empty() {
                    place.push_str(key);
                } else {
                    place.push('.');
                    place.push_str(key);
                }
            }
            Segment::Unknown => {}
        }
    }
    place
}

fn last_key(path: &Path) -> Option<&str> {
    match path.iter().next_back()? {
        Segment::Map { key } => Some(key),
        _ => None,
    }
}

/// `place.field`, or `field` at the top.
fn join(place: &str, field: &str) -> String {
    if place.is_empty() {
        field.to_owned()
    } else {
        format!("{place}.{field}")
    }
}

fn must_be(subject: &str, expected: &str, got: Option<Cow<'_, str>>) -> String {
    let expected = plain(expected);
    match got {
        Some(got) => format!("{subject} must be {expected}, got {got}"),
        None => format!("{subject} must be {expected}"),
    }
}

/// serde's `unknown field `x`, expected one of `a`, `b``, with the
/// field's whole path (serde_path_to_error's path already ends in the
/// field; an older version's might not).
fn unknown_field(place: &str, path: &Path, rest: &str) -> Option<String> {
    let (field, allowed) = match rest.rsplit_once("`, expected ") {
        Some((field, allowed)) => (field, Some(allowed)),
        None => (rest.strip_suffix("`, there are no fields")?, None),
    };
    let field = field.strip_prefix('`')?;
    let named = if last_key(path) == Some(field) {
        place.to_owned()
    } else {
        join(place, field)
    };
    Some(match allowed {
        Some(allowed) => {
            let allowed = allowed
                .trim_start_matches("one of ")
                .replace("` or `", "`, `");
            format!("unknown field `{named}`; allowed fields: {allowed}")
        }
        None => format!("unknown field `{named}`; this object has no fields"),
    })
}

/// A message of the body type's own (a rule it checks while reading), put
/// after the path. A message that starts with the field's own name
/// (`catchup must be ...`) has that name widened to the whole path.
fn own_rule(place: &str, last_key: Option<&str>, message: &str) -> String {
    if place.is_empty() {
        return message.to_owned();
    }
    let rest = last_key
        .and_then(|key| message.strip_prefix(key))
        .filter(|rest| rest.starts_with([' ', ':']));
    match rest {
        Some(rest) => format!("{place}{rest}"),
        None => format!("{place}: {message}"),
    }
}

/// What a value must be, from serde's description of the Rust type that
/// reads it.
fn plain(expected: &str) -> Cow<'_, str> {
    fn integer(min: impl Display, max: impl Display) -> Cow<'static, str> {
        format!("an integer from {min} to {max}").into()
    }
    match expected {
        "u8" => integer(0, u8::MAX),
        "u16" => integer(0, u16::MAX),
        "u32" => integer(0, u32::MAX),
        "u64" => integer(0, u64::MAX),
        "u128" => integer(0, u128::MAX),
        "usize" => integer(0, usize::MAX),
        "i8" => integer(i8::MIN, i8::MAX),
        "i16" => integer(i16::MIN, i16::MAX),
        "i32" => integer(i32::MIN, i32::MAX),
        "i64" => integer(i64::MIN, i64::MAX),
        "i128" => integer(i128::MIN, i128::MAX),
        "isize" => integer(isize::MIN, isize::MAX),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a string" | "a borrowed string" | "a byte array" | "a borrowed byte array" => {
            "a string".into()
        }
        "a character" => "a string of one character".into(),
        "a sequence" => "an array".into(),
        "a map" => "an object".into(),
        "unit" => "null".into(),
        "variant identifier" | "field identifier" => "a string".into(),
        _ if expected.starts_with("struct ") || expected.starts_with("unit struct ") => {
            "an object".into()
        }
        _ if expected.starts_with("tuple struct ") || expected.starts_with("a tuple") => {
            "an array".into()
        }
        // A unit-variant enum reads from a string.
        _ if expected.starts_with("enum ") => "a string".into(),
        // A description written for the API (`a number >= 1.0`) or a list
        // of allowed values.
        _ if ["a ", "an ", "one of ", "`"]
            .iter()
            .any(|start| expected.starts_with(start)) =>
        {
            expected.into()
        }
        _ => "a value of the type the API documents for it".into(),
    }
}

/// The value a client sent, from serde's description of it.
fn got_value(unexpected: &str) -> Option<Cow<'_, str>> {
    if let Some(quoted) = unexpected.strip_prefix("string ") {
        return Some(format!("the string {}", shorten(quoted)).into());
    }
    if let Some(character) = unexpected.strip_prefix("character ") {
        return Some(format!("the string {:?}", character.trim_matches('`')).into());
    }
    for kind in ["integer ", "floating point ", "boolean "] {
        if let Some(value) = unexpected.strip_prefix(kind) {
            return Some(value.trim_matches('`').into());
        }
    }
    match unexpected {
        "null" | "unit value" => Some("null".into()),
        "map" => Some("an object".into()),
        "sequence" => Some("an array".into()),
        _ => None,
    }
}

/// A quoted string cut to a readable length: the value may be a whole
/// payload sent in the wrong field.
fn shorten(quoted: &str) -> Cow<'_, str> {
    const KEEP: usize = 40;
    match quoted.char_indices().nth(KEEP) {
        Some((end, _)) => format!("{}...\"", &quoted[..end]).into(),
        None => quoted.into(),
    }
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;

    /// `describe` of what reading `value` as `T` answers.
    fn message<T: DeserializeOwned>(value: serde_json::Value) -> String {
        let err = serde_path_to_error::deserialize::<_, T>(value)
            .err()
            .expect("a wrong shape");
        describe("", err.path(), &err.inner().to_string())
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "read only for its errors")]
    struct Sample {
        #[serde(default)]
        small: Option<u8>,
        #[serde(default)]
        signed: Option<i64>,
        #[serde(default)]
        list: Option<Vec<String>>,
        #[serde(default)]
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "read only for its errors")]
    struct Inner {
        required: String,
    }

    #[test]
    fn every_form_names_the_path_in_plain_words() {
        for (value, want) in [
            (
                json!({"small": 256}),
                "small must be an integer from 0 to 255, got 256",
            ),
            (
                json!({"signed": "x"}),
                "signed must be an integer from -9223372036854775808 to 9223372036854775807, got the string \"x\"",
            ),
            (
                json!({"list": [1]}),
                "list[0] must be a string, got 1",
            ),
            (json!({"list": {}}), "list must be an array, got an object"),
            (json!({"inner": true}), "inner must be an object, got true"),
            (
                json!({"inner": []}),
                "inner must be an object, got an array of length 0",
            ),
            (json!({"inner": {}}), "inner.required is required"),
            (
                json!({"inner": {"required": "r", "other": 1}}),
                "unknown field `inner.other`; allowed fields: `required`",
            ),
            (
                json!({"smal": 1}),
                "unknown field `smal`; allowed fields: `small`, `signed`, `list`, `inner`",
            ),
            (json!(5), "the body must be an object, got 5"),
        ] {
            assert_eq!(message::<Sample>(value), want);
        }
    }

    #[test]
    fn own_rules_get_the_path_in_front() {
        let path = serde_path_to_error::Track::new().path();
        assert_eq!(
            describe("", &path, "payload or payload_base64 is required"),
            "payload or payload_base64 is required"
        );
        assert_eq!(
            describe(
                "messages[3]",
                &path,
                "payload or payload_base64 is required"
            ),
            "messages[3]: payload or payload_base64 is required"
        );
    }

    #[test]
    fn long_strings_are_cut() {
        let long = "x".repeat(1000);
        let got = message::<Sample>(json!({ "small": long }));
        assert!(got.len() < 120, "{got}");
        assert!(
            got.starts_with("small must be an integer from 0 to 255, got the string \"xxx"),
            "{got}"
        );
    }
}
