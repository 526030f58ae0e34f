//! The built-in tools, called directly as the engine calls them.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use plan_ports::{Tool, ToolContext, ToolError};
use plan_tools::{Echo, Exec, Fail, Http, Sleep, builtin_registry};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

fn ctx(attempt: u32) -> ToolContext {
    ToolContext {
        run_id: Arc::from("r"),
        step_id: Arc::from("s"),
        attempt,
        cancel: CancellationToken::new(),
        progress: None,
        deadline: None,
        output: None,
        working_dir: None,
        confined_to: None,
        answers: None,
    }
}

async fn call(tool: &dyn Tool, args: Value) -> Result<Value, ToolError> {
    tool.call(args, ctx(1)).await
}

#[test]
fn the_registry_has_every_builtin() {
    assert_eq!(
        builtin_registry().names(),
        [
            "chat.respond",
            "echo",
            "exec",
            "fail",
            "http",
            "respond",
            "sleep"
        ]
    );
}

#[tokio::test]
async fn echo_returns_its_args() {
    let args = json!({"a": [1, {"b": null}], "s": "x"});
    assert_eq!(call(&Echo, args.clone()).await.unwrap(), args);
}

#[tokio::test]
async fn sleep_waits_and_can_be_cancelled() {
    let start = Instant::now();
    assert_eq!(
        call(&Sleep, json!({"ms": 30})).await.unwrap(),
        json!({"slept_ms": 30})
    );
    assert!(start.elapsed() >= Duration::from_millis(30));

    let context = ctx(1);
    let cancel = context.cancel.clone();
    let handle = tokio::spawn(async move { Sleep.call(json!({"ms": 60_000}), context).await });
    cancel.cancel();
    assert_eq!(handle.await.unwrap().unwrap_err().code, "E_CANCELLED");

    let error = call(&Sleep, json!({"ms": "soon"})).await.unwrap_err();
    assert_eq!(error.code, "E_ARGS_INVALID");
    assert!(
        error
            .message
            .starts_with("`sleep` arguments: invalid type: string \"soon\""),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn fail_fails_as_told() {
    let error = call(&Fail, json!({"message": "boom"})).await.unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.message.as_str(), error.retryable),
        ("E_TOOL", "boom", false)
    );
    let error = call(&Fail, json!({"retryable": true, "code": "E_X"}))
        .await
        .unwrap_err();
    assert_eq!((error.code.as_str(), error.retryable), ("E_X", true));
    let args = json!({"times": 2, "retryable": true});
    assert!(Fail.call(args.clone(), ctx(2)).await.is_err());
    assert_eq!(
        Fail.call(args, ctx(3)).await.unwrap(),
        json!({"attempt": 3})
    );
    assert_eq!(
        call(&Fail, json!({"nope": 1})).await.unwrap_err().code,
        "E_ARGS_INVALID"
    );
}

#[tokio::test]
async fn exec_runs_argv_without_a_shell() {
    let hostile = "$(touch /tmp/plan-cli-pwned); rm -rf / ; echo `id`";
    let result = call(
        &Exec::default(),
        json!({"argv": ["printf", "%s|%s", hostile, "two words"]}),
    )
    .await
    .unwrap();
    assert_eq!(result["stdout"], json!(format!("{hostile}|two words")));
    assert_eq!(result["exit_code"], json!(0));
    assert!(!std::path::Path::new("/tmp/plan-cli-pwned").exists());
}

#[tokio::test]
async fn exec_passes_stdin_env_and_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let result = call(
        &Exec::default(),
        json!({"argv": ["sh", "-c", "cat; printf ' %s ' \"$GREETING\"; pwd"], "stdin": "from stdin", "env": {"GREETING": "hi"}, "cwd": dir.path()}),
    )
    .await
    .unwrap();
    let expected = format!(
        "from stdin hi {}\n",
        dir.path().canonicalize().unwrap().display()
    );
    assert_eq!(result["stdout"], json!(expected));
}

#[tokio::test]
async fn exec_fails_on_non_zero_exit_unless_unchecked() {
    let args = json!({"argv": ["sh", "-c", "echo partial; echo 'it broke' >&2; exit 3"]});
    let error = call(&Exec::default(), args.clone()).await.unwrap_err();
    assert_eq!(error.code, "E_EXIT_STATUS");
    assert_eq!(error.message, "`sh` exited with status 3: it broke");
    assert!(!error.retryable);
    assert_eq!(error.details.unwrap()["stdout"], json!("partial\n"));

    let mut unchecked = args;
    unchecked["check"] = json!(false);
    let result = call(&Exec::default(), unchecked).await.unwrap();
    assert_eq!(result["exit_code"], json!(3));
    assert_eq!(result["stderr"], json!("it broke\n"));
}

#[tokio::test]
async fn exec_reports_missing_programs_and_kills_on_timeout() {
    let error = call(
        &Exec::default(),
        json!({"argv": ["definitely-not-a-program-xyz"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, "E_EXEC_SPAWN");
    assert_eq!(
        error.message,
        "cannot run `definitely-not-a-program-xyz`: program not found"
    );
    assert_eq!(
        call(&Exec::default(), json!({"argv": []}))
            .await
            .unwrap_err()
            .code,
        "E_ARGS_INVALID"
    );

    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("survived");
    let start = Instant::now();
    let script = format!("sleep 2; touch {}", marker.display());
    let error = call(
        &Exec::default(),
        json!({"argv": ["sh", "-c", script], "timeout_ms": 100}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, "E_TIMEOUT");
    assert!(error.retryable);
    assert!(start.elapsed() < Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!marker.exists(), "the process was killed, not left running");
}

#[tokio::test]
async fn exec_keeps_at_most_max_output_bytes_of_each_stream() {
    // 3 MB on stdout, a little on stderr: the program is never blocked, and the kept part is
    // the first bytes.
    let script = "head -c 3000000 /dev/zero | tr '\\0' x; echo err >&2";
    let result = call(
        &Exec::default(),
        json!({"argv": ["sh", "-c", script], "max_output_bytes": 1000}),
    )
    .await
    .unwrap();
    assert_eq!(result["stdout"].as_str().unwrap(), "x".repeat(1000));
    assert_eq!(result["stdout_truncated"], json!(true));
    assert_eq!(result["stderr"], json!("err\n"));
    assert!(result.get("stderr_truncated").is_none());
    // The default keeps 1 MiB.
    let result = call(&Exec::default(), json!({"argv": ["sh", "-c", script]}))
        .await
        .unwrap();
    assert_eq!(result["stdout"].as_str().unwrap().len(), 1 << 20);
}

#[tokio::test]
async fn a_timed_out_exec_stops_what_its_program_started() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("survived");
    // The background child outlives `sh` unless the whole group is stopped.
    let script = format!("(sleep 1; touch {}) & wait", marker.display());
    let error = call(
        &Exec::default(),
        json!({"argv": ["sh", "-c", script], "timeout_ms": 100}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, "E_TIMEOUT");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!marker.exists(), "the program's child was left running");
}

/// Serves canned answers on loopback: `/json`, `/text`, `/status/N`, `/slow`, `/echo`.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let Some((head, body)) = read_request(&mut socket).await else {
                    return;
                };
                let mut parts = head.split_whitespace();
                let method = parts.next().unwrap_or("").to_owned();
                let path = parts.next().unwrap_or("").to_owned();
                let (status, content_type, extra, payload) = match path.as_str() {
                    "/json" => (
                        "200 OK",
                        "application/json",
                        "",
                        r#"{"ok":true,"items":[1,2]}"#.to_owned(),
                    ),
                    "/text" => ("200 OK", "text/plain", "", "plain words".to_owned()),
                    "/echo" => {
                        let key = head
                            .lines()
                            .find(|l| l.to_ascii_lowercase().starts_with("idempotency-key:"))
                            .unwrap_or("")
                            .to_owned();
                        (
                            "200 OK",
                            "application/json",
                            "",
                            json!({"method": method, "body": body, "key": key}).to_string(),
                        )
                    }
                    "/status/429" => (
                        "429 Too Many Requests",
                        "text/plain",
                        "Retry-After: 7\r\n",
                        "slow down".to_owned(),
                    ),
                    "/status/500" => (
                        "500 Internal Server Error",
                        "text/plain",
                        "",
                        "oops".to_owned(),
                    ),
                    "/status/404" => ("404 Not Found", "text/plain", "", "none".to_owned()),
                    "/slow" => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        ("200 OK", "text/plain", "", "late".to_owned())
                    }
                    _ => ("400 Bad Request", "text/plain", "", String::new()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{payload}",
                    payload.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn http_parses_json_and_returns_text() {
    let base = serve().await;
    let result = call(&Http::default(), json!({"url": format!("{base}/json")}))
        .await
        .unwrap();
    assert_eq!(result["status"], json!(200));
    assert_eq!(result["json"], json!({"ok": true, "items": [1, 2]}));
    assert_eq!(result["headers"]["content-type"], json!("application/json"));
    let result = call(&Http::default(), json!({"url": format!("{base}/text")}))
        .await
        .unwrap();
    assert_eq!(result["body"], json!("plain words"));
}

#[tokio::test]
async fn http_sends_json_bodies_with_the_idempotency_key() {
    let base = serve().await;
    let result = call(
        &Http::default(),
        json!({"method": "post", "url": format!("{base}/echo"), "json": {"a": 1}}),
    )
    .await
    .unwrap();
    assert_eq!(result["json"]["method"], json!("POST"));
    assert_eq!(result["json"]["body"], json!(r#"{"a":1}"#));
    assert_eq!(
        result["json"]["key"].as_str().unwrap().to_ascii_lowercase(),
        "idempotency-key: r/s"
    );
}

#[tokio::test]
async fn http_error_statuses_fail_and_only_some_retry() {
    let base = serve().await;
    let error = call(
        &Http::default(),
        json!({"url": format!("{base}/status/429")}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.retryable, error.retry_after),
        ("E_HTTP_STATUS", true, Some(Duration::from_secs(7)))
    );
    let error = call(
        &Http::default(),
        json!({"url": format!("{base}/status/500")}),
    )
    .await
    .unwrap_err();
    assert!(error.retryable);
    assert_eq!(error.details.unwrap()["body"], json!("oops"));
    let error = call(
        &Http::default(),
        json!({"url": format!("{base}/status/404")}),
    )
    .await
    .unwrap_err();
    assert!(!error.retryable);
    assert!(
        error.message.ends_with("answered 404 Not Found"),
        "{}",
        error.message
    );
    let result = call(
        &Http::default(),
        json!({"url": format!("{base}/status/404"), "check": false}),
    )
    .await
    .unwrap();
    assert_eq!(result["status"], json!(404));
}

#[tokio::test]
async fn http_transport_failures_and_timeouts_are_retryable() {
    let base = serve().await;
    let error = call(
        &Http::default(),
        json!({"url": format!("{base}/slow"), "timeout_ms": 100}),
    )
    .await
    .unwrap_err();
    assert_eq!((error.code.as_str(), error.retryable), ("E_TIMEOUT", true));

    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let error = call(
        &Http::default(),
        json!({"url": format!("http://{unused}/")}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.retryable),
        ("E_TRANSPORT", true)
    );

    assert_eq!(
        call(&Http::default(), json!({"url": "not a url"}))
            .await
            .unwrap_err()
            .code,
        "E_ARGS_INVALID"
    );
    let both = json!({"url": format!("{base}/json"), "json": {}, "body": "x"});
    assert_eq!(
        call(&Http::default(), both).await.unwrap_err().code,
        "E_ARGS_INVALID"
    );
}

/// Reads a request's head and body (by Content-Length) from a socket.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    Some((
        head,
        String::from_utf8_lossy(&buffer[head_end..]).to_string(),
    ))
}

/// A server that answers every request with `answer(head)`; it counts the requests it saw.
async fn answering(
    answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
) -> (String, Arc<std::sync::Mutex<Vec<(String, String)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let answer = Arc::new(answer);
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (answer, log) = (answer.clone(), log.clone());
            tokio::spawn(async move {
                if let Some((head, body)) = read_request(&mut socket).await {
                    let bytes = answer(&head);
                    log.lock().unwrap().push((head, body));
                    let _ = socket.write_all(&bytes).await;
                }
            });
        }
    });
    (format!("http://{address}"), seen)
}

fn redirect(status: &str, location: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

fn ok_text(text: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn http_has_a_default_timeout_for_a_silent_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket); // accepted, never answered
        }
    });
    assert_eq!(Http::DEFAULT_TIMEOUT, Duration::from_secs(30));
    let http = Http::with_defaults(Duration::from_millis(300), Http::DEFAULT_MAX_BYTES);
    let started = Instant::now();
    let error = call(&http, json!({"url": format!("http://{address}/")}))
        .await
        .unwrap_err();
    assert_eq!(error.code.as_str(), "E_TIMEOUT", "{}", error.message);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn http_stops_reading_a_body_past_its_cap() {
    // An endless chunked body: the cap stops it, holding no more than the cap.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = read_request(&mut socket).await;
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("{:x}\r\n{}\r\n", 8192, "x".repeat(8192));
                while socket.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    let error = call(
        &Http::default(),
        json!({"url": format!("http://{address}/"), "max_bytes": 100_000}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.retryable),
        ("E_HTTP_TOO_LARGE", false)
    );
    // A declared length past the cap is refused before the body is read.
    let (base, _) = answering(|_| {
        b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\nConnection: close\r\n\r\n".to_vec()
    })
    .await;
    let http = Http::with_defaults(Http::DEFAULT_TIMEOUT, 1000);
    let error = call(&http, json!({"url": base})).await.unwrap_err();
    assert_eq!(error.code.as_str(), "E_HTTP_TOO_LARGE");
}

#[tokio::test]
async fn redirects_to_another_origin_keep_only_safe_headers_and_never_resend_a_body() {
    let (elsewhere, seen_elsewhere) = answering(|_| ok_text("there")).await;
    let target = format!("{elsewhere}/landing");
    let (origin, seen_origin) = answering(move |head| {
        if head.starts_with("GET /same ") {
            redirect("302 Found", "/final")
        } else if head.starts_with("GET /final ") {
            ok_text("here")
        } else if head.contains(" /temporary ") {
            redirect("307 Temporary Redirect", &target)
        } else {
            redirect("302 Found", &target)
        }
    })
    .await;
    let headers =
        json!({"X-Api-Key": "k-123", "Authorization": "Bearer t", "Accept": "text/plain"});

    // Same origin: everything goes along.
    let result = call(
        &Http::default(),
        json!({"url": format!("{origin}/same"), "headers": headers}),
    )
    .await
    .unwrap();
    assert_eq!(result["body"], json!("here"));
    let last = seen_origin
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .0
        .to_ascii_lowercase();
    assert!(last.contains("x-api-key: k-123"), "{last}");

    // Another origin: only the safe headers.
    let result = call(
        &Http::default(),
        json!({"url": format!("{origin}/away"), "headers": headers}),
    )
    .await
    .unwrap();
    assert_eq!(result["body"], json!("there"));
    let head = seen_elsewhere.lock().unwrap()[0].0.to_ascii_lowercase();
    assert!(head.contains("accept: text/plain"), "{head}");
    assert!(
        !head.contains("x-api-key") && !head.contains("authorization"),
        "{head}"
    );

    // A 307 would re-send the body to the other origin: refused, and nothing reaches it.
    let before = seen_elsewhere.lock().unwrap().len();
    let error = call(
        &Http::default(),
        json!({"method": "POST", "url": format!("{origin}/temporary"), "json": {"secret": 1}}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.retryable),
        ("E_HTTP_REDIRECT", false)
    );
    assert_eq!(seen_elsewhere.lock().unwrap().len(), before);

    // A 302 after a POST is followed with a GET, without the body.
    call(
        &Http::default(),
        json!({"method": "POST", "url": format!("{origin}/away"), "body": "private"}),
    )
    .await
    .unwrap();
    let (head, body) = seen_elsewhere.lock().unwrap().last().unwrap().clone();
    assert!(head.starts_with("GET /landing"), "{head}");
    assert_eq!(body, "");
}

#[tokio::test]
async fn only_http_and_https_and_the_refusal_is_not_retried() {
    for url in ["ftp://example.invalid/x", "file:///etc/passwd"] {
        let error = call(&Http::default(), json!({"url": url}))
            .await
            .unwrap_err();
        assert_eq!(
            (error.code.as_str(), error.retryable),
            ("E_ARGS_INVALID", false),
            "{url}"
        );
    }
    let (origin, _) = answering(|_| redirect("302 Found", "file:///etc/passwd")).await;
    let error = call(&Http::default(), json!({"url": origin}))
        .await
        .unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.retryable),
        ("E_ARGS_INVALID", false)
    );
}

#[tokio::test]
async fn exec_gives_programs_only_the_allowed_environment() {
    // set_var is unsafe in edition 2024 (and unsafe code is forbidden here), so the test uses
    // a variable the test process already has that is not in the base list (cargo sets many).
    let name = std::env::vars()
        .map(|(name, _)| name)
        .find(|name| !Exec::BASE_ENV.contains(&name.as_str()) && !name.contains('='))
        .expect("the test's environment has a variable beyond the base list");
    let printenv = |exec: Exec| {
        let name = name.clone();
        async move {
            call(&exec, json!({"argv": ["printenv", name], "check": false}))
                .await
                .unwrap()
        }
    };
    let hidden = printenv(Exec::default()).await;
    assert_eq!(hidden["exit_code"], json!(1), "{hidden}");
    let passed = printenv(Exec::default().passing([name.clone()])).await;
    assert_eq!(passed["exit_code"], json!(0), "{passed}");
    let path = call(&Exec::default(), json!({"argv": ["printenv", "PATH"]}))
        .await
        .unwrap();
    assert!(!path["stdout"].as_str().unwrap().is_empty());
}

#[tokio::test]
async fn exec_refuses_nul_and_names_a_missing_cwd() {
    let error = call(&Exec::default(), json!({"argv": ["echo", "a\u{0}b"]}))
        .await
        .unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.retryable),
        ("E_ARGS_INVALID", false)
    );
    let error = call(
        &Exec::default(),
        json!({"argv": ["pwd"], "cwd": "/no/such/folder"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code.as_str(), "E_ARGS_INVALID");
    assert!(
        error.message.contains("/no/such/folder"),
        "{}",
        error.message
    );
    assert!(
        !error.message.contains("cannot run `pwd`"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn exec_in_a_run_under_a_policy_stays_in_its_work_folder() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("work");
    let plans = root.join("plans");
    let worktree = root.join("tree");
    std::fs::create_dir_all(plans.join("sub")).unwrap();
    std::fs::create_dir_all(worktree.join("src")).unwrap();
    let real = |path: &std::path::Path| std::fs::canonicalize(path).unwrap().display().to_string();
    let confined = |call_dir: Option<&std::path::Path>| ToolContext {
        confined_to: Some(Arc::from(root.as_path())),
        working_dir: call_dir.map(Arc::from),
        ..ctx(1)
    };
    let pwd = async |exec: &Exec, cwd: Option<&str>, call_dir| {
        let mut args = json!({"argv": ["pwd"]});
        if let Some(cwd) = cwd {
            args["cwd"] = json!(cwd);
        }
        exec.call(args, confined(call_dir))
            .await
            .map(|out| out["stdout"].as_str().unwrap().trim_end().to_owned())
    };
    // Without a base folder, programs start in the work folder; with one (the plan's folder,
    // inside the work folder), there, and a relative `cwd` is read from it.
    assert_eq!(
        pwd(&Exec::default(), None, None).await.unwrap(),
        real(&root)
    );
    let based = Exec::default().in_dir(plans.clone());
    assert_eq!(pwd(&based, None, None).await.unwrap(), real(&plans));
    assert_eq!(
        pwd(&based, Some("sub"), None).await.unwrap(),
        real(&plans.join("sub"))
    );
    // A task's call works in its worktree, and its relative `cwd` is the worktree's.
    let in_tree = pwd(&based, Some("src"), Some(&worktree)).await.unwrap();
    assert_eq!(in_tree, real(&worktree.join("src")));
    // Out of the work folder: refused, by `..`, by an absolute path, by a base outside it.
    for (exec, cwd) in [
        (&based, Some("../..")),
        (&based, Some("/")),
        (&Exec::default().in_dir(dir.path().to_path_buf()), None),
    ] {
        let error = pwd(exec, cwd, None).await.unwrap_err();
        assert!(
            error
                .message
                .contains("outside the folder programs may run in"),
            "{cwd:?}: {}",
            error.message
        );
    }
    // A work folder that is not there (a queue worker on another machine) runs nothing.
    let gone = ToolContext {
        confined_to: Some(Arc::from(dir.path().join("gone").as_path())),
        ..ctx(1)
    };
    let error = Exec::default()
        .call(json!({"argv": ["pwd"], "cwd": "/tmp"}), gone)
        .await
        .unwrap_err();
    assert_eq!(error.code.as_str(), "E_ARGS_INVALID");
}
