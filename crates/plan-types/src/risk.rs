//! How dangerous a call is: set by a plan's step (or node, or task call) and by a tool as its
//! default, so it lives here, below both the plan model and the tool port.

use serde::{Deserialize, Serialize};

/// How dangerous a call is. Only `high` is gated: it waits for an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Reads, or changes nothing that matters.
    Low,
    /// Changes things that can be undone.
    Medium,
    /// Changes things that cannot be undone: runs only once approved.
    High,
}
