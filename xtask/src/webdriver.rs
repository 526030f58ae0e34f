//! A WebDriver client for the dashboard's browser tests and `bench ui`: Debian's
//! `chromedriver` driving its headless `chromium`, over the W3C WebDriver protocol (JSON over
//! HTTP) with plain HTTP requests, no crate between. Errors are strings naming what failed.
//! (The CLI's tests include this file by path: one client for both.)

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The element reference key of the W3C protocol.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session in it, both ended when dropped.
pub(crate) struct Browser {
    driver: std::process::Child,
    port: u16,
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http(
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// One request to the driver: the answer's status and body (read to its `Content-Length`:
/// the driver keeps its connections open).
fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, String)> {
    use std::io::{BufRead as _, Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut reader = std::io::BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut length = 0;
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

impl Browser {
    /// Starts `chromedriver` and a headless `chromium` session in a window of `width` × `height`.
    pub(crate) fn start(width: u32, height: u32) -> Result<Browser, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|error| format!("no free port: {error}"))?
            .port();
        let driver = std::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|error| {
                format!(
                    "chromedriver is needed (apt-get install chromium chromium-driver): {error}"
                )
            })?;
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("chromedriver did not listen".to_owned());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|path| Path::new(path).exists())
            .ok_or("chromium is needed (apt-get install chromium chromium-driver)")?;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": binary,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         format!("--window-size={width},{height}")]
            }
        }}});
        let answer = browser.call("POST", "/session", Some(&capabilities))?;
        browser.session = answer["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session: {answer}"))?
            .to_owned();
        Ok(browser)
    }

    /// A command of the protocol: its `value`, or the driver's error.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let (status, body) = http(self.port, method, path, body)
            .map_err(|error| format!("{method} {path}: {error}"))?;
        let value: Value = serde_json::from_str(&body)
            .map_err(|_| format!("{method} {path}: not JSON: {body}"))?;
        if status != 200 {
            return Err(format!("{method} {path}: {status} {value}"));
        }
        Ok(value["value"].clone())
    }

    fn session_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Opens `url` (and waits for the page to load).
    pub(crate) fn open(&self, url: &str) -> Result<(), String> {
        self.session_call("POST", "/url", Some(&json!({"url": url})))
            .map(drop)
    }

    /// Runs `script` in the page (a function body: `return …`) with `args`: what it returns.
    pub(crate) fn script(&self, script: &str, args: &[Value]) -> Result<Value, String> {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(&json!({"script": script, "args": args})),
        )
    }

    /// What `script` returns once `done` holds for it (checked every `every`, for `within`).
    pub(crate) fn wait_for(
        &self,
        what: &str,
        within: Duration,
        every: Duration,
        script: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        let deadline = Instant::now() + within;
        loop {
            let value = self.script(script, &[])?;
            if done(&value) {
                return Ok(value);
            }
            if Instant::now() > deadline {
                return Err(format!("{what}: still {value}"));
            }
            std::thread::sleep(every);
        }
    }

    /// The first element `css` selects, once it is there and shown (20 s at most).
    fn find(&self, css: &str) -> Result<String, String> {
        let shown = format!(
            "const e = document.querySelector({css:?}); return !!e && !e.closest('[hidden]');"
        );
        let (within, every) = (Duration::from_secs(20), Duration::from_millis(100));
        self.wait_for(css, within, every, &shown, |v| v == &json!(true))?;
        let found = self.session_call(
            "POST",
            "/element",
            Some(&json!({"using": "css selector", "value": css})),
        )?;
        Ok(found[ELEMENT]
            .as_str()
            .ok_or_else(|| format!("{css}: {found}"))?
            .to_owned())
    }

    /// Clicks the first element `css` selects, as a person would (the driver moves the
    /// pointer there and clicks), once it is there and shown.
    pub(crate) fn click(&self, css: &str) -> Result<(), String> {
        let id = self.find(css)?;
        self.session_call("POST", &format!("/element/{id}/click"), Some(&json!({})))
            .map(drop)
    }

    /// Types `text` into the first element `css` selects (keys as WebDriver names them:
    /// `\u{E007}` is Enter), once it is there and shown.
    pub(crate) fn type_into(&self, css: &str, text: &str) -> Result<(), String> {
        let id = self.find(css)?;
        self.session_call(
            "POST",
            &format!("/element/{id}/value"),
            Some(&json!({"text": text})),
        )
        .map(drop)
    }

    /// A screenshot of the window: PNG, in base64.
    pub(crate) fn screenshot_base64(&self) -> Result<String, String> {
        let encoded = self.session_call("GET", "/screenshot", None)?;
        Ok(encoded.as_str().unwrap_or_default().to_owned())
    }
}
