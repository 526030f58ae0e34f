//! The pages' scripts parse: each page's own script after `common.js`, as the page loads them,
//! checked by Node (`node --check`); and no page has an inline script (the content security
//! policy allows only the server's own files). A script that does not parse leaves a page
//! blank, and only a browser would say so. Node must be installed (the MCP tests need it too):
//! without it this fails.

use std::path::Path;

#[test]
fn every_pages_scripts_parse() {
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
    let common = std::fs::read_to_string(assets.join("common.js")).expect("common.js");
    let dir = tempfile_dir();
    for (page, own) in [
        ("index.html", "index.js"),
        ("run.html", "run.js"),
        ("plans.html", "plans.js"),
    ] {
        let html = std::fs::read_to_string(assets.join(page)).expect("the page");
        assert!(!html.contains("<script>"), "{page} has an inline script");
        for loaded in ["/assets/common.js", &format!("/assets/{own}")] {
            assert!(
                html.contains(&format!("<script src=\"{loaded}\"></script>")),
                "{page} loads {loaded}"
            );
        }
        let mut script = common.clone();
        script.push('\n');
        script.push_str(&std::fs::read_to_string(assets.join(own)).expect("its script"));
        assert!(script.len() > common.len(), "{page} has a script");
        let file = dir.join(format!("{page}.js"));
        std::fs::write(&file, &script).expect("written");
        let checked = std::process::Command::new("node")
            .arg("--check")
            .arg(&file)
            .output()
            .expect("node is needed to check the pages' scripts");
        assert!(
            checked.status.success(),
            "{page}'s scripts do not parse:\n{}",
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}

/// A folder of this test's own.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("plan-ui-assets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    dir
}
