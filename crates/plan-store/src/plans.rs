//! The plan registry (mcp-cli's `/plan` commands): plans stored by id, to run by id.

use rusqlite::{OptionalExtension, params};

use crate::{Store, StoreError};

/// A stored plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredPlan {
    /// Its id.
    pub plan_id: String,
    /// Its title, if it has one.
    pub title: Option<String>,
    /// The file it came from.
    pub name: String,
    /// `json` or `yaml`.
    pub format: String,
    /// The document.
    #[serde(skip)]
    pub source: String,
    /// SHA-256 of the document.
    pub hash: String,
    /// When it was added.
    pub added_at: String,
    /// Who stored it: `operator`, `mcp_client` or `model` (plan-run's `Author`, by name).
    pub author: String,
}

impl Store {
    /// Stores a plan; an existing one with the same id is replaced only if `replace`.
    pub fn add_plan(&mut self, plan: &StoredPlan, replace: bool) -> Result<(), StoreError> {
        let transaction = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let exists: bool = transaction
            .query_row(
                "SELECT 1 FROM plans WHERE plan_id = ?1",
                [&plan.plan_id],
                |_| Ok(true),
            )
            .optional()?
            .unwrap_or(false);
        if exists && !replace {
            return Err(StoreError::PlanExists(plan.plan_id.clone()));
        }
        transaction.execute(
            "INSERT OR REPLACE INTO plans (plan_id, title, name, format, source, hash, added_at, author) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![plan.plan_id, plan.title, plan.name, plan.format, plan.source, plan.hash, plan.added_at, plan.author],
        )?;
        transaction.commit()?;
        Ok(())
    }

    /// Stores a plan its author (`plan.author`, a model or an MCP client) wrote, in one
    /// transaction, under the first of its id, `ID-2`, `ID-3`, … that no other author's plan
    /// holds: it never replaces another author's plan, however their writes interleave (the
    /// operator's [`Store::add_plan`] with `replace` still replaces any). Over one of its own
    /// author's only if `replace`. `text_for(id)` is the plan's text under another id than its
    /// own. Gives the id it is stored under.
    pub fn add_plan_apart(
        &mut self,
        mut plan: StoredPlan,
        replace: bool,
        text_for: impl FnOnce(&str) -> String,
    ) -> Result<String, StoreError> {
        let transaction = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let author_of = |id: &str| -> Result<Option<String>, StoreError> {
            Ok(transaction
                .query_row("SELECT author FROM plans WHERE plan_id = ?1", [id], |row| {
                    row.get(0)
                })
                .optional()?)
        };
        let mut id = plan.plan_id.clone();
        let mut n = 2;
        let mut holder = author_of(&id)?;
        while holder.as_ref().is_some_and(|author| *author != plan.author) {
            id = format!("{}-{n}", plan.plan_id);
            n += 1;
            holder = author_of(&id)?;
        }
        if holder.is_some() && !replace {
            return Err(StoreError::PlanExists(id));
        }
        if id != plan.plan_id {
            plan.source = text_for(&id);
            plan.hash = crate::plan_hash(&plan.source);
            plan.plan_id = id;
        }
        transaction.execute(
            "INSERT OR REPLACE INTO plans (plan_id, title, name, format, source, hash, added_at, author) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![plan.plan_id, plan.title, plan.name, plan.format, plan.source, plan.hash, plan.added_at, plan.author],
        )?;
        transaction.commit()?;
        Ok(plan.plan_id)
    }

    /// Every stored plan, by id.
    pub fn plans(&self) -> Result<Vec<StoredPlan>, StoreError> {
        let mut statement = self.conn.prepare("SELECT plan_id, title, name, format, source, hash, added_at, author FROM plans ORDER BY plan_id")?;
        let rows = statement
            .query_map([], plan_row)?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// The stored plan with this id, if any.
    pub fn find_plan(&self, plan_id: &str) -> Result<Option<StoredPlan>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT plan_id, title, name, format, source, hash, added_at, author FROM plans WHERE plan_id = ?1",
                [plan_id],
                plan_row,
            )
            .optional()?)
    }

    /// The response format the model `model` at `base_url` took last, as its name.
    pub fn model_format(&self, base_url: &str, model: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT format FROM model_formats WHERE base_url = ?1 AND model = ?2",
                [base_url, model],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Keeps `format` as the response format the model `model` at `base_url` takes.
    pub fn set_model_format(
        &mut self,
        base_url: &str,
        model: &str,
        format: &str,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO model_formats (base_url, model, format) VALUES (?1, ?2, ?3)
             ON CONFLICT (base_url, model) DO UPDATE SET format = excluded.format",
            [base_url, model, format],
        )?;
        Ok(())
    }

    /// Removes a stored plan (runs of it keep their own copy).
    pub fn remove_plan(&mut self, plan_id: &str) -> Result<(), StoreError> {
        match self
            .conn
            .execute("DELETE FROM plans WHERE plan_id = ?1", [plan_id])?
        {
            0 => Err(StoreError::NotFound {
                what: "plan",
                id: plan_id.to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

fn plan_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredPlan> {
    Ok(StoredPlan {
        plan_id: row.get(0)?,
        title: row.get(1)?,
        name: row.get(2)?,
        format: row.get(3)?,
        source: row.get(4)?,
        hash: row.get(5)?,
        added_at: row.get(6)?,
        author: row.get(7)?,
    })
}
