//! The raw values of `delayd serve`'s options, layer by layer: flags,
//! `DELAYD_*` environment variables, the `--config` TOML file. Values stay
//! strings here so that every source goes through the same parsers
//! (`build`): a bad value gets the same error wherever it came from, and
//! the error names the source.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{ConfigError, ServeArgs, Source};

/// Option key (the long name with `_` for `-`) to its values: several only
/// for the repeatable options.
type Layer = BTreeMap<String, Vec<String>>;

/// The layers, looked up in precedence order.
pub(super) struct Layers {
    flags: Layer,
    env: Layer,
    file: Layer,
}

impl Layers {
    /// Reads the flags, `env` and the `--config` file (named by the flag or
    /// by `DELAYD_CONFIG`).
    pub(super) fn read<I, K, V>(args: &ServeArgs, env: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let flags = flag_layer(args)?;
        let env = env_layer(env);
        let config_path = flags
            .get("config")
            .or_else(|| env.get("config"))
            .and_then(|v| v.first())
            .map(PathBuf::from);
        let file = match config_path {
            Some(path) => file_layer(&path)?,
            None => Layer::new(),
        };
        Ok(Self { flags, env, file })
    }

    /// The first layer that sets `key`, with its values.
    pub(super) fn get(&self, key: &str) -> Option<(Source, &[String])> {
        [
            (Source::Flag, &self.flags),
            (Source::Env, &self.env),
            (Source::File, &self.file),
        ]
        .into_iter()
        .find_map(|(source, layer)| layer.get(key).map(|v| (source, v.as_slice())))
    }

    pub(super) fn one(&self, key: &str) -> Option<(Source, String)> {
        self.get(key)
            .and_then(|(source, values)| values.first().map(|v| (source, v.clone())))
    }

    /// All values of a repeatable option; none when no layer sets it.
    pub(super) fn list(&self, key: &str) -> Vec<String> {
        self.get(key)
            .map(|(_, values)| values.to_vec())
            .unwrap_or_default()
    }

    /// Parses `key` (or its default) with `parse`, naming the source on error.
    pub(super) fn parse<T>(
        &self,
        key: &'static str,
        default: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        let (source, value) = self
            .one(key)
            .unwrap_or((Source::Default, default.to_owned()));
        parse(&value).map_err(|reason| ConfigError::Invalid {
            key,
            value,
            origin: source,
            reason,
        })
    }

    /// Like [`parse`](Self::parse) for an option without a default.
    pub(super) fn parse_opt<T>(
        &self,
        key: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        match self.one(key) {
            Some((_, value)) => self.parse(key, &value, parse).map(Some),
            None => Ok(None),
        }
    }
}

/// The flags given, read from `ServeArgs` through serde, so that the
/// struct is the one list of options: an absent option serializes as
/// `null`, an absent repeatable one as `[]`, an absent switch as `false`.
fn flag_layer(args: &ServeArgs) -> Result<Layer, ConfigError> {
    let value = serde_json::to_value(args).map_err(|error| {
        ConfigError::Conflict(format!("a command-line value is not UTF-8: {error}"))
    })?;
    let Value::Object(map) = value else {
        return Ok(Layer::new());
    };
    let layer = map.into_iter().filter_map(|(key, value)| {
        let values: Vec<String> = match value {
            Value::String(s) => vec![s],
            Value::Bool(true) => vec!["true".to_owned()],
            Value::Array(items) => items
                .into_iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => return None,
        };
        (!values.is_empty()).then_some((key, values))
    });
    Ok(layer.collect())
}

/// Every option's key: `ServeArgs`'s fields as serde names them.
fn keys() -> Vec<String> {
    match serde_json::to_value(ServeArgs::default()) {
        Ok(Value::Object(map)) => map.into_iter().map(|(key, _)| key).collect(),
        _ => Vec::new(),
    }
}

fn is_list(key: &str) -> bool {
    matches!(key, "token" | "push_allow")
}

/// Lists (`DELAYD_TOKEN`, `DELAYD_PUSH_ALLOW`) are comma-separated.
pub(super) fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `DELAYD_<KEY>` variables; others are ignored.
fn env_layer<I, K, V>(env: I) -> Layer
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let keys = keys();
    let mut layer = Layer::new();
    for (name, value) in env {
        let Some(suffix) = name.as_ref().strip_prefix("DELAYD_") else {
            continue;
        };
        let key = suffix.to_ascii_lowercase();
        if !keys.contains(&key) {
            continue;
        }
        let value = value.as_ref();
        let values = if is_list(&key) {
            split_list(value)
        } else {
            vec![value.to_owned()]
        };
        layer.insert(key, values);
    }
    layer
}

/// The `--config` file: a TOML table of the options (not `config` itself);
/// an unknown key is an error, so a typo is not silently ignored.
fn file_layer(path: &Path) -> Result<Layer, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::ReadFile {
        path: path.to_owned(),
        error,
    })?;
    let file_error = |reason: String| ConfigError::File {
        path: path.to_owned(),
        reason,
    };
    let table: BTreeMap<String, toml::Value> =
        toml::from_str(&text).map_err(|e: toml::de::Error| file_error(e.to_string()))?;
    let keys = keys();
    let mut layer = Layer::new();
    for (key, value) in table {
        if key == "config" || !keys.contains(&key) {
            return Err(file_error(format!("unknown key {key:?}")));
        }
        let values =
            toml_values(&value).map_err(|reason| file_error(format!("{key}: {reason}")))?;
        if values.len() > 1 && !is_list(&key) {
            return Err(file_error(format!("{key}: takes one value, not a list")));
        }
        layer.insert(key, values);
    }
    Ok(layer)
}

fn toml_values(value: &toml::Value) -> Result<Vec<String>, String> {
    match value {
        toml::Value::String(s) => Ok(vec![s.clone()]),
        toml::Value::Integer(i) => Ok(vec![i.to_string()]),
        toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
        toml::Value::Array(items) => items
            .iter()
            .map(|item| match item {
                toml::Value::String(s) => Ok(s.clone()),
                other => Err(format!("list items must be strings, got {other}")),
            })
            .collect(),
        other => Err(format!("unsupported value {other}")),
    }
}
