//! The dashboard's server for the tests (`plan-cli ui` in a lab) and plain HTTP requests to it,
//! read to the end, with nothing between the test and the bytes on the wire.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use super::Lab;

pub(crate) const TOKEN: &str = "a-test-token-0123456789";

/// The server, killed when the test ends.
pub(crate) struct Ui {
    child: std::process::Child,
    pub(crate) port: u16,
    /// The rest of what it prints on stdout, after its first line.
    stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Ui {
    /// Sends the server signal `name` (`TERM`, `INT`).
    pub(crate) fn signal(&self, name: &str) {
        let sent = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Whether the server ends by itself within `seconds`, and how.
    pub(crate) fn ends_within(&mut self, seconds: u64) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Stops the server: what it printed after its first line, on stdout then stderr.
    pub(crate) fn stop(&mut self) -> Vec<u8> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut printed = Vec::new();
        let _ = self.stdout.read_to_end(&mut printed);
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_end(&mut printed);
        }
        printed
    }
}

/// `plan-cli ui --port 0 ARGS` in the lab with `env`, once it has printed its first line
/// (returned, trimmed); the port is read from it when it names 127.0.0.1.
pub(crate) fn start(lab: &Lab, args: &[&str], env: &[(&str, &str)]) -> (Ui, String) {
    let mut command = lab.command();
    command.args(["ui", "--port", "0"]).args(args);
    command
        .env("PLAN_UI_TOKEN", TOKEN)
        .envs(env.iter().copied());
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    let port = line
        .trim()
        .strip_prefix("dashboard: http://127.0.0.1:")
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or(0);
    let ui = Ui {
        child,
        port,
        stdout,
    };
    (ui, line.trim().to_owned())
}

/// `plan-cli ui --port 0 --no-open` in the lab, once it has said where it is: its URL.
pub(crate) fn serve(lab: &Lab) -> (Ui, String) {
    let (ui, line) = start(lab, &["--no-open"], &[]);
    let url = line
        .strip_prefix("dashboard: ")
        .unwrap_or_else(|| panic!("the first line names the dashboard: {line:?}"))
        .to_owned();
    assert_ne!(ui.port, 0, "{url}");
    (ui, url)
}

/// An answer: its status, its headers (names in lower case) and its body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body))
    }
}

/// `METHOD PATH` with `headers` (a `Host` of `127.0.0.1:PORT` unless one is given), read to
/// the end (the server closes the connection).
pub(crate) fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    send(port, method, path, headers, None)
}

/// `POST PATH` with a JSON body and `headers`.
pub(crate) fn post(port: u16, path: &str, body: &Value, headers: &[(&str, &str)]) -> Answer {
    send(port, "POST", path, headers, Some(body))
}

pub(crate) fn send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        text.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.map(Value::to_string).unwrap_or_default();
    if !body.is_empty() {
        text.push_str("Content-Type: application/json\r\n");
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(text.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect::<Vec<_>>();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        unchunk(body)
    } else {
        body.to_owned()
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// A chunked body, whole.
pub(crate) fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

pub(crate) fn bearer() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TOKEN}"))
}

/// Polls `status RUN --json` until `done` says so (a minute at most): the last status.
pub(crate) fn status_until(lab: &Lab, run: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..600 {
        let (_, status) = lab.json(&["status", run, "--json"]);
        if done(&status) {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("run {run} did not get there")
}

/// A plan whose high-risk `deploy` (an `echo` of `deploy_text`) waits for an approval after
/// `build`, with step `last` after it when given.
pub(crate) fn gated_plan(lab: &Lab, deploy_text: &str, last: Option<&str>) -> std::path::PathBuf {
    let mut steps = vec![
        serde_json::json!({"id": "build", "tool": "echo", "args": {"text": "built"}}),
        serde_json::json!({"id": "deploy", "tool": "echo", "risk": "high", "args": {"text": deploy_text}, "depends_on": ["build"]}),
    ];
    if let Some(last) = last {
        steps.push(serde_json::json!({"id": last, "tool": "echo", "args": {"text": last}, "depends_on": ["deploy"]}));
    }
    lab.write(
        "gated.json",
        &serde_json::json!({"id": "gated", "steps": steps}),
    )
}

/// Runs `plan` until it waits for an approval (exit 5): its run id.
pub(crate) fn waiting_run(lab: &Lab, plan: &std::path::Path) -> String {
    let (code, report) = lab.json(&["run", super::path_str(plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    report["run_id"].as_str().unwrap().to_owned()
}
