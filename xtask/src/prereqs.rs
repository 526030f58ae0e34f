//! What the tests need from the machine, checked before anything is built.
//!
//! The tests drive real parts (SPEC's "real parts in tests"): redis-server for the queue,
//! Chromium and its WebDriver for the dashboard, Node.js with npm and python3 with venv for the
//! MCP servers and SDKs, git for worktrees, PostgreSQL's server for the ledger's second backend.
//! A test never skips when one is missing, it fails; so `cargo xtask test` makes sure they are
//! there first. As root with apt-get (a fresh CI or developer machine here) it installs what is
//! missing from Debian's packages: one `apt-get update`, then one line per group. Elsewhere it
//! stops before building, with the exact commands to run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// One thing the tests need, the Debian packages that bring it and why.
struct Need {
    what: &'static str,
    packages: &'static [&'static str],
    present: fn() -> bool,
}

const NEEDS: &[Need] = &[
    Need {
        what: "git (task steps' worktrees)",
        packages: &["git"],
        present: || on_path("git"),
    },
    Need {
        what: "Node.js and npm (MCP servers, BullMQ workers in Node)",
        packages: &["nodejs", "npm"],
        present: || on_path("node") && on_path("npm"),
    },
    Need {
        what: "python3 with venv (MCP servers and SDK, BullMQ in Python)",
        packages: &["python3", "python3-venv"],
        present: || {
            Command::new("python3")
                .args(["-c", "import venv, ensurepip"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        },
    },
    Need {
        what: "redis-server (the queue's tests)",
        packages: &["redis-server"],
        present: || on_path("redis-server"),
    },
    Need {
        what: "Chromium and chromedriver (the dashboard's browser tests)",
        packages: &["chromium", "chromium-driver"],
        present: || on_path("chromedriver") && (on_path("chromium") || on_path("chromium-browser")),
    },
    Need {
        what: "PostgreSQL's server (the ledger on PostgreSQL)",
        packages: &["postgresql"],
        present: || postgres_bin().is_some(),
    },
];

/// Makes sure every [`NEEDS`] entry is there, installing what is missing where it can.
pub(crate) fn ensure(root: &Path) -> Result<()> {
    let missing: Vec<&Need> = NEEDS.iter().filter(|need| !(need.present)()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing
        .iter()
        .flat_map(|need| need.packages.iter().copied())
        .collect();
    if !can_install() {
        let mut message = String::from("the tests need what this machine lacks:\n");
        for need in &missing {
            message.push_str(&format!("  - {}\n", need.what));
        }
        message.push_str(&format!(
            "install it, then run `cargo xtask test` again:\n  sudo apt-get update && sudo apt-get install -y {}",
            packages.join(" ")
        ));
        bail!(message);
    }
    let log = root.join("target").join("xtask-apt.log");
    std::fs::create_dir_all(root.join("target"))?;
    eprintln!(
        "installing what the tests need with apt-get (its output in {}):",
        log.display()
    );
    apt(&log, &["update"])?;
    for need in &missing {
        eprintln!("  {}: {}", need.what, need.packages.join(" "));
        let mut args = vec!["install", "-y"];
        args.extend(need.packages.iter().copied());
        apt(&log, &args)?;
        if !(need.present)() {
            bail!(
                "{} is still missing after `apt-get install {}` (see {})",
                need.what,
                need.packages.join(" "),
                log.display()
            );
        }
    }
    Ok(())
}

/// The folder of PostgreSQL's server programs (`initdb`, `pg_ctl`, `postgres`): on PATH, or
/// where Debian's packages put them (`/usr/lib/postgresql/VERSION/bin`, the newest first).
pub(crate) fn postgres_bin() -> Option<PathBuf> {
    if let Some(initdb) = find_on_path("initdb") {
        return initdb.parent().map(Path::to_path_buf);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn on_path(program: &str) -> bool {
    find_on_path(program).is_some()
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Root with apt-get: the machines of this project (CI's and a developer's) are.
fn can_install() -> bool {
    on_path("apt-get")
        && Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii() == b"0")
}

fn apt(log: &Path, args: &[&str]) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let status = Command::new("apt-get")
        .args(["-q", "-o", "Dpkg::Use-Pty=0"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .context("running apt-get")?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "`apt-get {}` failed ({status}); its last lines:\n{}",
            args.join(" "),
            tail.join("\n")
        );
    }
    Ok(())
}
