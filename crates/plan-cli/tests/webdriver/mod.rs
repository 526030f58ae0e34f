//! The browser tests' headless Chromium: the WebDriver client `bench ui` uses too (one client,
//! included by path), failing the test at once where the client gives an error. Without
//! `chromium` and `chromedriver` a test fails: it never passes untested.

#[path = "../../../../xtask/src/webdriver.rs"]
mod client;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

/// A browser session, ended when dropped.
pub(crate) struct Browser(client::Browser);

/// What a step of the client gave, or the test's failure with why.
fn or_fail<T>(result: Result<T, String>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}

impl Browser {
    /// Starts `chromedriver` and a headless `chromium` session in a window of `width` × `height`.
    pub(crate) fn start(width: u32, height: u32) -> Browser {
        Browser(or_fail(client::Browser::start(width, height)))
    }

    /// Opens `url` (and waits for the page to load).
    pub(crate) fn open(&self, url: &str) {
        or_fail(self.0.open(url));
    }

    /// Runs `script` in the page (a function body: `return …`) with `args`: what it returns.
    pub(crate) fn script(&self, script: &str, args: &[Value]) -> Value {
        or_fail(self.0.script(script, args))
    }

    /// What `script` returns once `done` holds for it (checked every 100 ms, for `seconds`).
    pub(crate) fn wait_for(
        &self,
        what: &str,
        seconds: u64,
        script: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let (within, every) = (Duration::from_secs(seconds), Duration::from_millis(100));
        or_fail(self.0.wait_for(what, within, every, script, done))
    }

    /// Clicks the first element `css` selects, as a person would, once it is there and shown.
    pub(crate) fn click(&self, css: &str) {
        or_fail(self.0.click(css));
    }

    /// Types `text` into the first element `css` selects (`\u{E007}` is Enter).
    pub(crate) fn type_into(&self, css: &str, text: &str) {
        or_fail(self.0.type_into(css, text));
    }

    /// A screenshot of the window, as PNG, written to `path`.
    pub(crate) fn screenshot(&self, path: &Path) {
        let png = base64::engine::general_purpose::STANDARD
            .decode(or_fail(self.0.screenshot_base64()))
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}
