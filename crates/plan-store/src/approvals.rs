//! Approvals of a run's high-risk calls: asked for when the run halts `WAITING`, decided by
//! `plan-cli approve` / `reject` (or `run --approve`), read back by `resume`. A decision is
//! taken once: it is never asked for again, and a different decision on the same call is
//! refused rather than silently replacing it. An approval given to a call's request is of the
//! arguments it showed: asked again with others, the call is pending again.

use plan_types::{Approvals, PendingApproval, TaskStatus};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde_json::Value;

use crate::runs::{RunState, damaged};
use crate::{Store, StoreError};

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Asked for, not decided.
    Pending,
    /// The call may run.
    Approved,
    /// The call fails with `E_REJECTED`.
    Rejected,
}

impl Decision {
    /// `pending`, `approved` or `rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Pending => "pending",
            Decision::Approved => "approved",
            Decision::Rejected => "rejected",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "pending" => Ok(Decision::Pending),
            "approved" => Ok(Decision::Approved),
            "rejected" => Ok(Decision::Rejected),
            other => Err(StoreError::Damaged {
                what: "approval",
                message: format!("unknown decision `{other}`"),
            }),
        }
    }
}

/// One approval of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRow {
    /// The step, map item, or `__plan__`.
    pub step_id: String,
    /// Where it stands.
    pub decision: Decision,
    /// Why it was rejected (or a note on the approval).
    pub reason: Option<String>,
    /// What the run asked to call, when it asked.
    pub request: Option<PendingApproval>,
    /// The answer given with the approval (`approve --input`): fields that replace the call's
    /// arguments of the same names.
    pub input: Option<Value>,
    /// When it was asked for or decided (RFC 3339).
    pub at: String,
}

impl Store {
    /// Ends a run `WAITING` for these approvals at `at`, with where its waiting blocks
    /// stopped, in one transaction. Calls already decided keep their decision.
    pub fn halt_for_approvals(
        &mut self,
        run_id: &str,
        pending: &[PendingApproval],
        checkpoints: &[(String, Value)],
        at: std::time::SystemTime,
    ) -> Result<(), StoreError> {
        let now = crate::timestamp(at);
        let transaction = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut insert = transaction.prepare(
                // A call approved with other arguments asks again, with these.
                "INSERT INTO approvals (run_id, step_id, decision, request, decided_at)
                 VALUES (?1, ?2, 'pending', ?3, ?4)
                 ON CONFLICT (run_id, step_id) DO UPDATE SET request = excluded.request,
                   decided_at = CASE decision WHEN 'approved' THEN excluded.decided_at ELSE decided_at END,
                   decision = 'pending', reason = NULL, input = NULL
                 WHERE decision IN ('pending', 'approved')",
            )?;
            for request in pending {
                let json = serde_json::to_string(request).map_err(damaged("approval"))?;
                insert.execute(params![run_id, request.step_id, json, now])?;
            }
            let mut keep = transaction.prepare(
                "INSERT OR REPLACE INTO checkpoints (run_id, step_id, checkpoint) VALUES (?1, ?2, ?3)",
            )?;
            for (step_id, checkpoint) in checkpoints {
                keep.execute(params![run_id, step_id, checkpoint.to_string()])?;
            }
        }
        transaction.execute(
            "UPDATE runs SET state = ?2, task_status = ?3, finished_at = ?4, updated_at = ?4 WHERE run_id = ?1",
            params![
                run_id,
                RunState::Waiting.as_str(),
                TaskStatus::Waiting.as_str(),
                now
            ],
        )?;
        transaction.commit()?;
        Ok(())
    }

    /// Decides an approval (`Approved` or `Rejected`). Deciding the same way again changes
    /// nothing; deciding the other way is refused.
    pub fn decide(
        &mut self,
        run_id: &str,
        step_id: &str,
        decision: Decision,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.decide_all(run_id, &[step_id.to_owned()], decision, reason)
    }

    /// Approves one call with the answer `input` a person gave (`approve --input`). Approving
    /// it again with the same answer changes nothing; with another, or after it was decided
    /// without one, is refused.
    pub fn approve_with_input(
        &mut self,
        run_id: &str,
        step_id: &str,
        input: &Value,
    ) -> Result<(), StoreError> {
        let now = crate::timestamp(std::time::SystemTime::now());
        let text = input.to_string();
        let transaction = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let existing: Option<(String, Option<String>)> = transaction
            .query_row(
                "SELECT decision, input FROM approvals WHERE run_id = ?1 AND step_id = ?2",
                params![run_id, step_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        match existing {
            None => {
                transaction.execute(
                    "INSERT INTO approvals (run_id, step_id, decision, input, decided_at)
                     VALUES (?1, ?2, 'approved', ?3, ?4)",
                    params![run_id, step_id, text, now],
                )?;
            }
            Some((decision, _)) if Decision::parse(&decision)? == Decision::Pending => {
                transaction.execute(
                    "UPDATE approvals SET decision = 'approved', reason = NULL, input = ?3, decided_at = ?4
                     WHERE run_id = ?1 AND step_id = ?2",
                    params![run_id, step_id, text, now],
                )?;
            }
            Some((decision, earlier)) => {
                let earlier_given = earlier.is_some();
                let same = Decision::parse(&decision)? == Decision::Approved
                    && earlier
                        .map(|earlier| plan_types::json::from_str::<Value>(&earlier))
                        .transpose()
                        .map_err(damaged("approval"))?
                        .as_ref()
                        == Some(input);
                if !same {
                    return Err(StoreError::Decided {
                        step_id: step_id.to_owned(),
                        decision: match (decision.as_str(), earlier_given) {
                            ("approved", true) => "approved with another answer",
                            ("approved", false) => "approved without an answer",
                            _ => "rejected",
                        },
                    });
                }
            }
        }
        transaction.commit()?;
        Ok(())
    }

    /// Decides several approvals in one transaction: all of them, or (when one was decided
    /// the other way) none.
    pub fn decide_all(
        &mut self,
        run_id: &str,
        step_ids: &[String],
        decision: Decision,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = crate::timestamp(std::time::SystemTime::now());
        let transaction = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for step_id in step_ids {
            let existing: Option<String> = transaction
                .query_row(
                    "SELECT decision FROM approvals WHERE run_id = ?1 AND step_id = ?2",
                    params![run_id, step_id],
                    |row| row.get(0),
                )
                .optional()?;
            match existing.as_deref().map(Decision::parse).transpose()? {
                Some(Decision::Pending) | None => {
                    transaction.execute(
                        "INSERT INTO approvals (run_id, step_id, decision, reason, decided_at)
                         VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT (run_id, step_id) DO UPDATE
                         SET decision = excluded.decision, reason = excluded.reason, input = NULL,
                           decided_at = excluded.decided_at",
                        params![run_id, step_id, decision.as_str(), reason, now],
                    )?;
                }
                Some(same) if same == decision => {}
                Some(other) => {
                    // Dropping the transaction rolls back the ones decided before this one.
                    return Err(StoreError::Decided {
                        step_id: step_id.to_owned(),
                        decision: other.as_str(),
                    });
                }
            }
        }
        transaction.commit()?;
        Ok(())
    }

    /// A run's approvals: pending ones in the order they were asked for, then by id.
    pub fn approvals(&self, run_id: &str) -> Result<Vec<ApprovalRow>, StoreError> {
        let mut statement = self.conn.prepare(
            "SELECT step_id, decision, reason, request, decided_at, input FROM approvals
             WHERE run_id = ?1 ORDER BY decided_at, step_id",
        )?;
        let rows = statement.query_map([run_id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<String>>(2)?,
                row.get::<_, Option<String>>(3)?,
                row.get::<_, String>(4)?,
                row.get::<_, Option<String>>(5)?,
            ))
        })?;
        let mut approvals = Vec::new();
        for row in rows {
            let (step_id, decision, reason, request, at, input) = row?;
            let request = request
                .map(|text| plan_types::json::from_str(&text))
                .transpose()
                .map_err(damaged("approval"))?;
            let input = input
                .map(|text| plan_types::json::from_str(&text))
                .transpose()
                .map_err(damaged("approval"))?;
            approvals.push(ApprovalRow {
                step_id,
                decision: Decision::parse(&decision)?,
                reason,
                request,
                input,
                at,
            });
        }
        Ok(approvals)
    }

    /// The decisions taken on a run's approvals, for the engine.
    pub fn decisions(&self, run_id: &str) -> Result<Approvals, StoreError> {
        let mut approvals = Approvals::new();
        for row in self.approvals(run_id)? {
            // A question a call asked a person (`ID@input#N`): answered, or still open.
            if let Some(request) = row.request.as_ref().filter(|r| r.is_question()) {
                match (row.decision, row.input) {
                    (Decision::Pending, _) => approvals.await_answer(request.clone()),
                    (Decision::Approved, Some(answer)) => {
                        approvals.answer_question(request.clone(), answer);
                    }
                    // Approved without an answer (not something `approve` does): it is asked
                    // again.
                    (Decision::Approved, None) => {}
                    (Decision::Rejected, _) => approvals.refuse_question(
                        request.clone(),
                        row.reason.unwrap_or_else(|| "rejected".to_owned()),
                    ),
                }
                continue;
            }
            match row.decision {
                Decision::Pending => {}
                // Approved as it asked to be called: with those arguments.
                Decision::Approved => approvals.approve_with(
                    row.step_id,
                    row.request.and_then(|request| request.args),
                    row.input,
                ),
                Decision::Rejected => approvals.reject(
                    row.step_id,
                    row.reason.unwrap_or_else(|| "rejected".to_owned()),
                ),
            }
        }
        Ok(approvals)
    }
}
