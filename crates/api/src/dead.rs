//! Dead letters: redrive (the dead list answers a
//! [`MessageList`](crate::MessageList)).

use serde::{Deserialize, Serialize};

/// `POST .../dead/redrive`. An empty body redrives every dead message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// Only these ids (ids that are not dead are ignored); all dead
    /// messages when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<String>>,
}

/// The redrive answer: how many messages went back to `ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = RedriveResponse))]
pub struct Redriven {
    pub redriven: u64,
}
