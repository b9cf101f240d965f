//! [`Payload`]: a message's bytes as api.md carries them, in `payload`
//! (UTF-8 text) or `payload_base64` (any bytes), in requests and responses
//! alike.
//!
//! It is flattened into the surrounding object (`#[serde(flatten)]`), so
//! its two keys sit beside the message's other fields. Reading it takes
//! exactly one of the two keys out of that object (both or neither is an
//! error a client sees as 400 `invalid_argument`), and decodes base64 as
//! it reads, so no caller handles an undecoded payload.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

/// The key of a UTF-8 payload.
pub const TEXT_KEY: &str = "payload";
/// The key of a base64 (standard alphabet, padded) payload.
pub const BASE64_KEY: &str = "payload_base64";

/// A message body: text when it is valid UTF-8 (readable on the wire and in
/// logs), else bytes sent as base64.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Sent as `payload`.
    Text(String),
    /// Sent as `payload_base64`; held decoded.
    Binary(Vec<u8>),
}

impl Payload {
    /// Text when `bytes` are valid UTF-8, else binary: the server's rule for
    /// which key a response uses.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        match String::from_utf8(bytes) {
            Ok(text) => Self::Text(text),
            Err(err) => Self::Binary(err.into_bytes()),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Text(text) => text.as_bytes(),
            Self::Binary(bytes) => bytes,
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Self::Text(text) => text.into_bytes(),
            Self::Binary(bytes) => bytes,
        }
    }

    /// The number of payload bytes (after base64 decoding), which is what
    /// the server's `--max-payload` limits.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<&str> for Payload {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Self {
        Self::from_bytes(bytes)
    }
}

/// Encodes bytes the way `payload_base64` carries them (standard alphabet,
/// padded).
pub fn encode_base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut object = serializer.serialize_struct("Payload", 1)?;
        match self {
            Self::Text(text) => object.serialize_field(TEXT_KEY, text)?,
            Self::Binary(bytes) => object.serialize_field(BASE64_KEY, &encode_base64(bytes))?,
        }
        object.end()
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // As a struct with these two fields, a flattened read takes only
        // these keys out of the surrounding object, so the object's own
        // `deny_unknown_fields` still sees every other key.
        deserializer.deserialize_struct("Payload", &[TEXT_KEY, BASE64_KEY], PayloadVisitor)
    }
}

struct PayloadVisitor;

impl<'de> Visitor<'de> for PayloadVisitor {
    type Value = Payload;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object with `{TEXT_KEY}` or `{BASE64_KEY}`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Payload, A::Error> {
        let mut found: Option<Payload> = None;
        while let Some(key) = map.next_key::<String>()? {
            let payload = match key.as_str() {
                TEXT_KEY => Payload::Text(map.next_value()?),
                BASE64_KEY => Payload::Binary(decode(&map.next_value::<String>()?)?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if found.replace(payload).is_some() {
                return Err(de::Error::custom(BOTH));
            }
        }
        found.ok_or_else(|| de::Error::custom(NEITHER))
    }
}

/// The errors of the one-of rule, the same for both ways of reading it.
const BOTH: &str = "give either payload or payload_base64, not both";
const NEITHER: &str = "payload or payload_base64 is required";

impl Payload {
    /// The payload of a request body whose two keys were read as fields of
    /// their own (`text` from `payload`, `binary` from `payload_base64`
    /// through [`read_base64`]): exactly one must be given. `null` counts
    /// as absent, as for every optional field of a request.
    pub(crate) fn from_keys(text: Option<String>, binary: Option<Vec<u8>>) -> Result<Self, String> {
        match (text, binary) {
            (Some(text), None) => Ok(Self::Text(text)),
            (None, Some(bytes)) => Ok(Self::Binary(bytes)),
            (Some(_), Some(_)) => Err(BOTH.to_owned()),
            (None, None) => Err(NEITHER.to_owned()),
        }
    }
}

/// Reads `payload_base64` as a field of its own, decoded (`null`: absent).
pub(crate) fn read_base64<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<u8>>, D::Error> {
    Option::<String>::deserialize(deserializer)?
        .map(|encoded| decode(&encoded))
        .transpose()
}

fn decode<E: de::Error>(encoded: &str) -> Result<Vec<u8>, E> {
    STANDARD.decode(encoded.as_bytes()).map_err(|err| {
        E::custom(format_args!(
            "{BASE64_KEY} must be standard base64 (padded): {err}"
        ))
    })
}

#[cfg(feature = "openapi")]
mod schema {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    use utoipa::openapi::RefOr;

    use super::{Payload, BASE64_KEY, TEXT_KEY};

    /// The one-of rule as prose, not as `oneOf`.
    const RULE: &str = "Exactly one of `payload` (UTF-8 text, may be empty) and \
        `payload_base64` (standard base64, padded) is present: a request with both \
        or neither is refused with 400 `invalid_argument`; a response carries \
        `payload` when the bytes are valid UTF-8, else `payload_base64`.";

    /// An object with both keys optional and the rule in its description.
    /// Flattened into a message it reads as two optional properties beside
    /// the message's own. A `oneOf` of two single-key objects said the rule
    /// in the schema itself, but generators (openapi-python-client among
    /// them) cannot merge an `allOf` that includes a `oneOf` and dropped
    /// every operation using it; the server enforces the rule either way
    /// (`PayloadVisitor`).
    impl utoipa::PartialSchema for Payload {
        fn schema() -> RefOr<Schema> {
            let text = string(&format!(
                "UTF-8 payload (may be empty). Not with `{BASE64_KEY}`."
            ));
            let binary = string(&format!(
                "Standard base64 (padded) of a binary payload. Not with `{TEXT_KEY}`."
            ));
            ObjectBuilder::new()
                .description(Some(RULE))
                .property(TEXT_KEY, text)
                .property(BASE64_KEY, binary)
                .into()
        }
    }

    fn string(description: &str) -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    }

    impl utoipa::ToSchema for Payload {}

    #[cfg(test)]
    mod tests {
        use utoipa::PartialSchema as _;

        /// Both keys are optional properties of one plain object: no
        /// `oneOf`, no `required`.
        #[test]
        fn both_keys_optional_on_one_object() {
            let schema = serde_json::to_value(super::Payload::schema()).unwrap();
            assert_eq!(schema["type"], "object");
            assert_eq!(schema["properties"]["payload"]["type"], "string");
            assert_eq!(schema["properties"]["payload_base64"]["type"], "string");
            assert!(schema.get("oneOf").is_none() && schema.get("required").is_none());
            assert!(schema["description"]
                .as_str()
                .unwrap()
                .contains("Exactly one of"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Holder {
        id: String,
        #[serde(flatten)]
        payload: Payload,
    }

    fn read(value: serde_json::Value) -> Result<Holder, String> {
        serde_json::from_value(value).map_err(|err| err.to_string())
    }

    #[test]
    fn text_and_binary_round_trip() {
        let text = read(json!({"id": "a", "payload": ""})).unwrap();
        assert_eq!(text.payload, Payload::Text(String::new()));
        let binary = read(json!({"id": "a", "payload_base64": "/wD+"})).unwrap();
        assert_eq!(binary.payload, Payload::Binary(vec![0xff, 0, 0xfe]));
        assert_eq!(
            serde_json::to_value(&binary).unwrap(),
            json!({"id": "a", "payload_base64": "/wD+"})
        );
    }

    #[test]
    fn exactly_one_key_and_nothing_unknown() {
        let both = read(json!({"id": "a", "payload": "p", "payload_base64": "cA=="}));
        assert!(both.unwrap_err().contains("not both"));
        let neither = read(json!({"id": "a"}));
        assert!(neither.unwrap_err().contains("is required"));
        let bad = read(json!({"id": "a", "payload_base64": "***"}));
        assert!(bad
            .unwrap_err()
            .starts_with("payload_base64 must be standard base64"));
        let typo = read(json!({"id": "a", "payload": "p", "dealy_ms": 1}));
        assert!(typo.unwrap_err().contains("unknown field `dealy_ms`"));
    }

    #[test]
    fn from_bytes_picks_the_key() {
        assert_eq!(
            Payload::from_bytes(b"hi".to_vec()),
            Payload::Text("hi".into())
        );
        assert_eq!(Payload::from_bytes(vec![0xff]), Payload::Binary(vec![0xff]));
    }
}
