//! The plan-cli run lifecycle as a library: what a run's plan, records and ledger rows make
//! together. Today: [`state_file`], the execute-state.json (schema 2.0) document of a run.
#![deny(missing_docs)]

pub mod state_file;
