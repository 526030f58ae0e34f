//! The durable ledger of plan-cli runs (SQLite: runs, step attempts, variables, events).
//!
//! Not built yet: this crate holds the workspace's place for the ledger, which is the next
//! capability after the foundation. Nothing depends on it, and runs are not persisted until
//! it lands; see `docs/ARCHITECTURE.md`.
