-- A ledger written by plan-cli 0.1.0 before the compact layout (schema 3), dumped with sqlite3 .dump;
-- the pragmas .dump leaves out come first.
PRAGMA application_id = 1347174734;
PRAGMA user_version = 3;
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
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
INSERT INTO runs VALUES('01M82K0M110NNBER1R8HBCKXJ6','v3-sample','plan.json','json',replace('{"id": "v3-sample", "steps": [\n  {"id": "a", "tool": "echo", "args": {"n": 1}, "binds": {"n": "$.n"}},\n  {"id": "m", "tool": "echo", "expand_on": "${items}", "args": {"x": "$each"}, "depends_on": ["a"]},\n  {"id": "f", "tool": "fail", "args": {"message": "flaky", "retryable": true, "times": 1}, "retry": {"attempts": 2, "backoff_ms": 1}},\n  {"id": "z", "tool": "fail", "args": {"message": "broken"}, "depends_on": ["f"]}\n], "variables": {"items": [1, 2]}}\n','\n',char(10)),'1a968ede25c8a2c666e40991164a1eb7f1c0a8ee81997134e32af0340edc3003','{}','{"max_concurrency":null,"mode":"auto"}','finished','FAILED',14263,'2026-11-22T21:36:22.049Z','2026-11-22T21:36:22.050Z','2026-11-22T21:36:22.050Z');
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
INSERT INTO records VALUES(1,'01M82K0M110NNBER1R8HBCKXJ6','a',0,NULL,1,'{"step_id":"a","ok":true,"skipped":false,"result":{"n":1},"attempts":1,"duration_ms":0}');
INSERT INTO records VALUES(2,'01M82K0M110NNBER1R8HBCKXJ6','f',2,NULL,1,'{"step_id":"f","ok":true,"skipped":false,"result":{"attempt":2},"attempts":2,"duration_ms":0}');
INSERT INTO records VALUES(3,'01M82K0M110NNBER1R8HBCKXJ6','z',3,NULL,0,'{"step_id":"z","ok":false,"skipped":false,"error":{"code":"E_TOOL","message":"broken"},"attempts":1,"duration_ms":0}');
INSERT INTO records VALUES(4,'01M82K0M110NNBER1R8HBCKXJ6','m-0',1,0,1,'{"step_id":"m-0","ok":true,"skipped":false,"result":{"x":1},"attempts":1,"duration_ms":0}');
INSERT INTO records VALUES(5,'01M82K0M110NNBER1R8HBCKXJ6','m-1',1,1,1,'{"step_id":"m-1","ok":true,"skipped":false,"result":{"x":2},"attempts":1,"duration_ms":0}');
INSERT INTO records VALUES(6,'01M82K0M110NNBER1R8HBCKXJ6','m',1,NULL,1,'{"step_id":"m","ok":true,"skipped":false,"result":{"items":2},"attempts":0,"duration_ms":0}');
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
INSERT INTO attempts VALUES(1,'01M82K0M110NNBER1R8HBCKXJ6','a',1,'2026-11-22T21:36:22.050Z',0,1,NULL,NULL);
INSERT INTO attempts VALUES(2,'01M82K0M110NNBER1R8HBCKXJ6','f',1,'2026-11-22T21:36:22.050Z',0,0,'E_TOOL','flaky');
INSERT INTO attempts VALUES(3,'01M82K0M110NNBER1R8HBCKXJ6','f',2,'2026-11-22T21:36:22.050Z',0,1,NULL,NULL);
INSERT INTO attempts VALUES(4,'01M82K0M110NNBER1R8HBCKXJ6','z',1,'2026-11-22T21:36:22.050Z',0,0,'E_TOOL','broken');
INSERT INTO attempts VALUES(5,'01M82K0M110NNBER1R8HBCKXJ6','m-0',1,'2026-11-22T21:36:22.050Z',0,1,NULL,NULL);
INSERT INTO attempts VALUES(6,'01M82K0M110NNBER1R8HBCKXJ6','m-1',1,'2026-11-22T21:36:22.050Z',0,1,NULL,NULL);
CREATE TABLE variables (
        run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        name    TEXT NOT NULL,
        value   TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    ) WITHOUT ROWID;
INSERT INTO variables VALUES('01M82K0M110NNBER1R8HBCKXJ6','n','1');
CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        seq     INTEGER NOT NULL,
        event   TEXT NOT NULL,
        UNIQUE (run_id, seq)
    );
INSERT INTO events VALUES(1,'01M82K0M110NNBER1R8HBCKXJ6',1,'{"type":"run.started","run_id":"01M82K0M110NNBER1R8HBCKXJ6","attempt":0,"ts":"2026-11-22T21:36:22.050Z","plan_id":"v3-sample"}');
INSERT INTO events VALUES(2,'01M82K0M110NNBER1R8HBCKXJ6',2,'{"type":"tool.called","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"f","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"fail"}');
INSERT INTO events VALUES(3,'01M82K0M110NNBER1R8HBCKXJ6',3,'{"type":"tool.failed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"f","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"fail","duration_ms":0,"error":{"code":"E_TOOL","message":"flaky"}}');
INSERT INTO events VALUES(4,'01M82K0M110NNBER1R8HBCKXJ6',4,'{"type":"step.retrying","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"f","attempt":2,"ts":"2026-11-22T21:36:22.050Z","error":{"code":"E_TOOL","message":"flaky"},"delay_ms":0}');
INSERT INTO events VALUES(5,'01M82K0M110NNBER1R8HBCKXJ6',5,'{"type":"tool.called","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"a","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"echo"}');
INSERT INTO events VALUES(6,'01M82K0M110NNBER1R8HBCKXJ6',6,'{"type":"tool.succeeded","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"a","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"echo","duration_ms":0}');
INSERT INTO events VALUES(7,'01M82K0M110NNBER1R8HBCKXJ6',7,'{"type":"tool.called","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"f","attempt":2,"ts":"2026-11-22T21:36:22.050Z","tool":"fail"}');
INSERT INTO events VALUES(8,'01M82K0M110NNBER1R8HBCKXJ6',8,'{"type":"tool.succeeded","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"f","attempt":2,"ts":"2026-11-22T21:36:22.050Z","tool":"fail","duration_ms":0}');
INSERT INTO events VALUES(9,'01M82K0M110NNBER1R8HBCKXJ6',9,'{"type":"step.executed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"a","attempt":1,"ts":"2026-11-22T21:36:22.050Z","ok":true,"duration_ms":0}');
INSERT INTO events VALUES(10,'01M82K0M110NNBER1R8HBCKXJ6',10,'{"type":"step.executed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"f","attempt":2,"ts":"2026-11-22T21:36:22.050Z","ok":true,"duration_ms":0}');
INSERT INTO events VALUES(11,'01M82K0M110NNBER1R8HBCKXJ6',11,'{"type":"tool.called","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"z","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"fail"}');
INSERT INTO events VALUES(12,'01M82K0M110NNBER1R8HBCKXJ6',12,'{"type":"tool.failed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"z","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"fail","duration_ms":0,"error":{"code":"E_TOOL","message":"broken"}}');
INSERT INTO events VALUES(13,'01M82K0M110NNBER1R8HBCKXJ6',13,'{"type":"tool.called","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"m-0","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"echo"}');
INSERT INTO events VALUES(14,'01M82K0M110NNBER1R8HBCKXJ6',14,'{"type":"tool.succeeded","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"m-0","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"echo","duration_ms":0}');
INSERT INTO events VALUES(15,'01M82K0M110NNBER1R8HBCKXJ6',15,'{"type":"tool.called","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"m-1","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"echo"}');
INSERT INTO events VALUES(16,'01M82K0M110NNBER1R8HBCKXJ6',16,'{"type":"tool.succeeded","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"m-1","attempt":1,"ts":"2026-11-22T21:36:22.050Z","tool":"echo","duration_ms":0}');
INSERT INTO events VALUES(17,'01M82K0M110NNBER1R8HBCKXJ6',17,'{"type":"step.executed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"z","attempt":1,"ts":"2026-11-22T21:36:22.050Z","ok":false,"duration_ms":0,"error":{"code":"E_TOOL","message":"broken"}}');
INSERT INTO events VALUES(18,'01M82K0M110NNBER1R8HBCKXJ6',18,'{"type":"step.executed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"m-0","attempt":1,"ts":"2026-11-22T21:36:22.050Z","ok":true,"duration_ms":0}');
INSERT INTO events VALUES(19,'01M82K0M110NNBER1R8HBCKXJ6',19,'{"type":"step.executed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"m-1","attempt":1,"ts":"2026-11-22T21:36:22.050Z","ok":true,"duration_ms":0}');
INSERT INTO events VALUES(20,'01M82K0M110NNBER1R8HBCKXJ6',20,'{"type":"step.executed","run_id":"01M82K0M110NNBER1R8HBCKXJ6","step_id":"m","attempt":0,"ts":"2026-11-22T21:36:22.050Z","ok":true,"duration_ms":0}');
INSERT INTO events VALUES(21,'01M82K0M110NNBER1R8HBCKXJ6',21,'{"type":"run.finished","run_id":"01M82K0M110NNBER1R8HBCKXJ6","attempt":0,"ts":"2026-11-22T21:36:22.050Z","duration_ms":1,"task_status":"FAILED"}');
CREATE TABLE approvals (
        run_id      TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id     TEXT NOT NULL,
        decision    TEXT NOT NULL,
        reason      TEXT,
        decided_at  TEXT NOT NULL, request TEXT,
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
CREATE TABLE checkpoints (
        run_id      TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id     TEXT NOT NULL,
        checkpoint  TEXT NOT NULL,
        PRIMARY KEY (run_id, step_id)
    ) WITHOUT ROWID;
CREATE INDEX runs_by_start ON runs (started_at);
CREATE INDEX records_in_order ON records (run_id, position, item);
CREATE INDEX attempts_by_run ON attempts (run_id, step_id);
COMMIT;
