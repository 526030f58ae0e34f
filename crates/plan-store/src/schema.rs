//! The schema and its migrations, tracked by SQLite's `user_version`; plan-cli ledgers carry
//! an `application_id` so that other SQLite files are recognised and left alone.
//!
//! Hand-written rather than `rusqlite_migration`: that crate's current release needs another
//! rusqlite than ours, and two rusqlites cannot link one sqlite3.

use std::path::Path;

use rusqlite::Connection;

use crate::StoreError;

/// `PLAN` in ASCII.
const APPLICATION_ID: i64 = 0x504C_414E;

/// Migration `i` brings the schema from version `i` to `i + 1`. Append only: never edit one
/// that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "
    CREATE TABLE runs (
        run_id       TEXT PRIMARY KEY,
        plan_id      TEXT NOT NULL,
        plan_name    TEXT NOT NULL,
        plan_format  TEXT NOT NULL,
        plan_source  TEXT NOT NULL,
        plan_hash    TEXT NOT NULL,
        inputs       TEXT NOT NULL,
        options      TEXT NOT NULL,
        state        TEXT NOT NULL,
        task_status  TEXT,
        owner_pid    INTEGER,
        started_at   TEXT NOT NULL,
        updated_at   TEXT NOT NULL,
        finished_at  TEXT
    );
    CREATE INDEX runs_by_start ON runs (started_at);
    -- Rows hold whole JSON records: rowid tables with unique indexes keep the B-tree keys small
    -- (WITHOUT ROWID suits only small rows).
    CREATE TABLE records (
        id        INTEGER PRIMARY KEY,
        run_id    TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id   TEXT NOT NULL,
        position  INTEGER NOT NULL,
        item      INTEGER,
        ok        INTEGER NOT NULL,
        record    TEXT NOT NULL,
        UNIQUE (run_id, step_id)
    );
    CREATE INDEX records_in_order ON records (run_id, position, item);
    CREATE TABLE attempts (
        id            INTEGER PRIMARY KEY,
        run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id       TEXT NOT NULL,
        attempt       INTEGER NOT NULL,
        started_at    TEXT NOT NULL,
        duration_ms   INTEGER NOT NULL,
        ok            INTEGER NOT NULL,
        error_code    TEXT,
        error_message TEXT
    );
    CREATE INDEX attempts_by_run ON attempts (run_id, step_id);
    CREATE TABLE variables (
        run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        name    TEXT NOT NULL,
        value   TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    ) WITHOUT ROWID;
    CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        seq     INTEGER NOT NULL,
        event   TEXT NOT NULL,
        UNIQUE (run_id, seq)
    );
    CREATE TABLE approvals (
        run_id      TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id     TEXT NOT NULL,
        decision    TEXT NOT NULL,
        reason      TEXT,
        decided_at  TEXT NOT NULL,
        PRIMARY KEY (run_id, step_id)
    ) WITHOUT ROWID;
    CREATE TABLE plans (
        plan_id   TEXT PRIMARY KEY,
        title     TEXT,
        name      TEXT NOT NULL,
        format    TEXT NOT NULL,
        source    TEXT NOT NULL,
        hash      TEXT NOT NULL,
        added_at  TEXT NOT NULL
    );
    ",
    // 2: what a pending approval would call, so `status` and `approve` can show it.
    "ALTER TABLE approvals ADD COLUMN request TEXT;",
    // 3: where a waiting block step stopped, so that `resume` goes on from that node.
    "
    CREATE TABLE checkpoints (
        run_id      TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id     TEXT NOT NULL,
        checkpoint  TEXT NOT NULL,
        PRIMARY KEY (run_id, step_id)
    ) WITHOUT ROWID;
    ",
    // 4: a compact layout, about a fifth of the bytes per step. Runs get an integer key that
    // rows carry instead of the 26-character run id; a record is stored without its step id
    // (a column already); events are columns (kind as a number, time as milliseconds) with
    // only the rarer fields as JSON; attempts are no longer stored apart, since each one is a
    // `tool.called` event and a `tool.succeeded` or `tool.failed` one.
    "
    ALTER TABLE runs ADD COLUMN key INTEGER;
    UPDATE runs SET key = rowid;
    CREATE UNIQUE INDEX runs_by_key ON runs (key);
    CREATE TABLE step_records (
        id        INTEGER PRIMARY KEY,
        run       INTEGER NOT NULL REFERENCES runs (key) ON DELETE CASCADE,
        step_id   TEXT NOT NULL,
        position  INTEGER NOT NULL,
        item      INTEGER,
        record    TEXT NOT NULL,
        UNIQUE (run, step_id)
    );
    INSERT INTO step_records (run, step_id, position, item, record)
        SELECT r.key, x.step_id, x.position, x.item, json_remove(x.record, '$.step_id')
        FROM records x JOIN runs r ON r.run_id = x.run_id ORDER BY x.id;
    DROP TABLE records;
    CREATE TABLE run_events (
        run          INTEGER NOT NULL REFERENCES runs (key) ON DELETE CASCADE,
        seq          INTEGER NOT NULL,
        kind         INTEGER NOT NULL,
        step_id      TEXT,
        attempt      INTEGER NOT NULL,
        ts_ms        INTEGER NOT NULL,
        tool         TEXT,
        duration_ms  INTEGER,
        ok           INTEGER,
        rest         TEXT,
        PRIMARY KEY (run, seq)
    ) WITHOUT ROWID;
    INSERT INTO run_events (run, seq, kind, step_id, attempt, ts_ms, tool, duration_ms, ok, rest)
        SELECT r.key, e.seq,
            CASE e.event ->> '$.type'
                WHEN 'run.started' THEN 0 WHEN 'tool.called' THEN 1 WHEN 'tool.succeeded' THEN 2
                WHEN 'tool.failed' THEN 3 WHEN 'step.retrying' THEN 4 WHEN 'step.skipped' THEN 5
                WHEN 'step.executed' THEN 6 WHEN 'run.finished' THEN 7 WHEN 'block.entered' THEN 8
                WHEN 'block.transition' THEN 9 WHEN 'tool.progress' THEN 10
                WHEN 'approval.awaiting' THEN 11 END,
            e.event ->> '$.step_id',
            coalesce(e.event ->> '$.attempt', 0),
            unixepoch(e.event ->> '$.ts') * 1000 + CAST(substr(e.event ->> '$.ts', 21, 3) AS INTEGER),
            e.event ->> '$.tool',
            e.event ->> '$.duration_ms',
            e.event ->> '$.ok',
            nullif(json_remove(e.event, '$.type', '$.run_id', '$.step_id', '$.attempt', '$.ts',
                '$.tool', '$.duration_ms', '$.ok'), '{}')
        FROM events e JOIN runs r ON r.run_id = e.run_id;
    DROP TABLE events;
    DROP TABLE attempts;
    ",
    // 5: plan revisions of runs that were re-planned after a failure (`run --replan`): the
    // run's row holds the current plan; each earlier one is kept here, numbered from 0.
    "
    CREATE TABLE plan_revisions (
        run_id       TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        revision     INTEGER NOT NULL,
        plan_source  TEXT NOT NULL,
        plan_hash    TEXT NOT NULL,
        reason       TEXT NOT NULL,
        replaced_at  TEXT NOT NULL,
        PRIMARY KEY (run_id, revision)
    );
    ",
    // 6: where each run's log of batches stands. Under `--durability sync` a step that waits
    // for its dependencies' records has them appended to a log file beside the ledger (one
    // per run and process, numbered by `generation`), which the writer folds into the tables;
    // `folded` is the last batch folded, so that recovery from a crash replays only the rest.
    "
    CREATE TABLE run_logs (
        run         INTEGER PRIMARY KEY REFERENCES runs (key) ON DELETE CASCADE,
        generation  INTEGER NOT NULL,
        folded      INTEGER NOT NULL
    );
    ",
    // 7: who stored each plan (`operator`, `mcp_client`, `model`): an MCP client may replace
    // or remove only plans clients stored.
    "ALTER TABLE plans ADD COLUMN author TEXT NOT NULL DEFAULT 'operator';",
    // 8: the attempts a step made before it was run again (`retry`, `resume --retry-failed`):
    // a re-run goes on counting from there, so its calls get identities (queue job ids) of
    // their own. Written only when records are forgotten: nothing per step.
    "
    CREATE TABLE earlier_attempts (
        run_id    TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id   TEXT NOT NULL,
        attempts  INTEGER NOT NULL,
        PRIMARY KEY (run_id, step_id)
    ) WITHOUT ROWID;
    ",
    // 9: the response format each model endpoint took last (`plan create`): the next request
    // starts there instead of stepping down again.
    "
    CREATE TABLE model_formats (
        base_url  TEXT NOT NULL,
        model     TEXT NOT NULL,
        format    TEXT NOT NULL,
        PRIMARY KEY (base_url, model)
    ) WITHOUT ROWID;
    ",
    // 10: the answer a person gave with an approval (`approve --input`), overlaid on the
    // call's arguments when it is made.
    "ALTER TABLE approvals ADD COLUMN input TEXT;",
];

/// The numbers event kinds are stored as (migration 4 spells the same table out in SQL).
/// Append only: a number, once shipped, means its kind forever.
pub(crate) const EVENT_KINDS: &[(i64, &str)] = &[
    (0, "run.started"),
    (1, "tool.called"),
    (2, "tool.succeeded"),
    (3, "tool.failed"),
    (4, "step.retrying"),
    (5, "step.skipped"),
    (6, "step.executed"),
    (7, "run.finished"),
    (8, "block.entered"),
    (9, "block.transition"),
    (10, "tool.progress"),
    (11, "approval.awaiting"),
    (12, "plan.replanned"),
    (13, "task.changed"),
    (14, "assistant.delta"),
    (15, "assistant.final"),
];

/// The schema version this build writes.
pub(crate) const VERSION: i64 = MIGRATIONS.len() as i64;

/// For a read-only connection: the file is this program's ledger, of this very version.
pub(crate) fn check_readable(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let foreign = |why: String| StoreError::Foreign {
        path: path.to_path_buf(),
        why,
    };
    let application_id: i64 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(|error| foreign(error.to_string()))?;
    if application_id != APPLICATION_ID {
        return Err(foreign(format!(
            "its application id is {application_id:#x}"
        )));
    }
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found: version,
            supported: VERSION,
        });
    }
    if version < VERSION {
        return Err(StoreError::Open {
            path: path.to_path_buf(),
            message: format!(
                "it is a ledger of an older plan-cli (schema {version}, this one reads {VERSION}) and cannot be upgraded without write access"
            ),
        });
    }
    Ok(())
}

pub(crate) fn check_and_migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let foreign = |why: String| StoreError::Foreign {
        path: path.to_path_buf(),
        why,
    };
    // One read transaction, so that the three reads see the same file: another process may
    // be creating this ledger right now, and its tables come with its application id.
    conn.execute_batch("BEGIN")?;
    let read = (|| -> Result<(i64, i64, i64), StoreError> {
        // The first read is where a file that is not SQLite at all shows itself.
        let application_id: i64 = conn
            .pragma_query_value(None, "application_id", |row| row.get(0))
            .map_err(|error| foreign(error.to_string()))?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
        let tables: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))?;
        Ok((application_id, version, tables))
    })();
    let _ = conn.execute_batch("COMMIT");
    let (application_id, version, tables) = read?;
    if application_id != 0 && application_id != APPLICATION_ID {
        return Err(foreign(format!(
            "its application id is {application_id:#x}"
        )));
    }
    if application_id == 0 && tables > 0 {
        return Err(foreign(format!(
            "it is an SQLite database with {tables} tables of another program"
        )));
    }
    if version > VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found: version,
            supported: VERSION,
        });
    }
    // WAL: readers never block the writer, and a commit is durable against a killed process
    // without an fsync per commit (synchronous=NORMAL).
    let mode = journal_mode_wal(conn)?;
    if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
        return Err(StoreError::Open {
            path: path.to_path_buf(),
            message: format!("the file system does not support WAL (journal mode stayed {mode})"),
        });
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // A large run's ledger outgrows SQLite's default 2 MB page cache: keep up to 4 MiB cached
    // and map the file for reads, so that a page not cached is read without a system call.
    // (A 64 MiB cache cost a 100,000-step run 20 MB of peak memory, and a run on a ledger of
    // 1,000,000 steps was no faster with it: see docs/benchmarks.md.)
    conn.pragma_update(None, "cache_size", -4_096)?;
    conn.pragma_update(None, "mmap_size", 268_435_456)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    if version < VERSION {
        migrate(conn)?;
    }
    Ok(())
}

/// Switches the file to WAL. On a new file that other processes are opening too, SQLite
/// answers "busy" at once rather than through the busy handler: try again for a while.
fn journal_mode_wal(conn: &Connection) -> Result<String, StoreError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if error.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            result => return Ok(result?),
        }
    }
}

fn migrate(conn: &Connection) -> Result<(), StoreError> {
    // One transaction for every migration due, with the version bump: a new ledger is made
    // in one commit, not one per migration, and an upgrade that fails leaves the ledger as it
    // was. Several processes may open a new ledger at once: the version is read again under
    // the write lock, and migrations another process made meanwhile are not made twice.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let migrated = (|| {
        let now: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
        let start = usize::try_from(now).unwrap_or(0);
        let mut script = String::new();
        for migration in MIGRATIONS.iter().skip(start) {
            script.push_str(migration);
            script.push_str(";\n");
        }
        if !script.is_empty() {
            script.push_str(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {VERSION};"
            ));
            conn.execute_batch(&script)?;
        }
        conn.execute_batch("COMMIT")
    })();
    if let Err(error) = migrated {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(error.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_numbers_event_kinds_as_the_code_does() {
        let migration = MIGRATIONS[3]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        // Kinds added after migration 4 (from 12, `plan.replanned`) had no events to convert.
        for (number, kind) in EVENT_KINDS.iter().filter(|(number, _)| *number <= 11) {
            assert!(
                migration.contains(&format!("WHEN '{kind}' THEN {number} ")),
                "{kind} is not {number} in migration 4"
            );
        }
    }
}
