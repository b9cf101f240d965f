//! Field readers for request bodies: an explicit `null` reads as if the
//! field were absent. The server has always accepted `null` for its
//! optional fields (many JSON encoders write `null` for "not set"), and
//! fields that now hold their default directly (`max: u32` rather than
//! `Option<u32>`) must keep accepting it.

use serde::{Deserialize, Deserializer};

/// `null` or absent: `T::default()`.
pub(crate) fn or_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `null`: `DEFAULT`.
pub(crate) fn u32_or<'de, D: Deserializer<'de>, const DEFAULT: u32>(
    deserializer: D,
) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(deserializer)?.unwrap_or(DEFAULT))
}

/// `null`: `DEFAULT`.
pub(crate) fn u64_or<'de, D: Deserializer<'de>, const DEFAULT: u64>(
    deserializer: D,
) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.unwrap_or(DEFAULT))
}

/// Distinguishes `"push": null` (`Some(None)`) from an absent field
/// (`None`, through `#[serde(default)]`).
pub(crate) fn present_or_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}
