//! `plan-fuzz`: runs a seeded sequence of inputs through the plan loader in worker processes
//! and reports every failure. `cargo xtask fuzz` builds and runs it.
//!
//! ```text
//! plan-fuzz [--inputs N] [--seed S] [--jobs J] [--fixtures DIR] [--out DIR]
//! plan-fuzz --show I [--seed S]          # prints input I
//! ```
//!
//! Each worker prints the number of the input it is about to run, so when a worker dies (a
//! stack overflow aborts the process) or stops answering, the parent knows which input did
//! it, saves it under `--out`, and starts a new worker after it.

use std::io::{BufRead, BufReader, Write};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use plan_fuzz::{Generator, check, read_corpus};
use plan_graph::Format;

/// The stack the loader gets: a tokio worker thread's, the smallest a plan is loaded on
/// (`mcp serve` loads plans there).
const STACK: usize = 2 * 1024 * 1024;
/// A worker silent this long is stuck on its input.
const STUCK: Duration = Duration::from_secs(20);
/// Resident memory a worker may reach.
const MEMORY_LIMIT_BYTES: u64 = 2 * 1024 * 1024 * 1024;

struct Options {
    inputs: u64,
    seed: u64,
    jobs: u64,
    fixtures: PathBuf,
    out: PathBuf,
    worker: Option<(u64, u64)>,
    show: Option<u64>,
}

fn main() {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("plan-fuzz: {message}");
            std::process::exit(2);
        }
    };
    let corpus = match read_corpus(&options.fixtures) {
        Ok(corpus) => corpus,
        Err(error) => {
            eprintln!(
                "plan-fuzz: cannot read the fixtures in {}: {error}",
                options.fixtures.display()
            );
            std::process::exit(2);
        }
    };
    let generator = Generator::new(corpus, options.seed);
    if let Some(i) = options.show {
        let (text, format) = generator.input(i);
        println!("# {format:?}\n{text}");
        return;
    }
    let code = match options.worker {
        Some((from, to)) => work(&generator, from, to),
        None => lead(&options),
    };
    std::process::exit(code);
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        inputs: 10_000,
        seed: 1,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        fixtures: PathBuf::from("fixtures"),
        out: PathBuf::from("target/fuzz"),
        worker: None,
        show: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        let number = |text: String| {
            text.replace('_', "")
                .parse::<u64>()
                .map_err(|e| format!("not a number: {text}: {e}"))
        };
        match flag.as_str() {
            "--inputs" => options.inputs = number(value()?)?,
            "--seed" => options.seed = number(value()?)?,
            "--jobs" => options.jobs = number(value()?)?.max(1),
            "--fixtures" => options.fixtures = PathBuf::from(value()?),
            "--out" => options.out = PathBuf::from(value()?),
            "--show" => options.show = Some(number(value()?)?),
            "--worker" => {
                let from = number(value()?)?;
                let to = number(value()?)?;
                options.worker = Some((from, to));
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(options)
}

/// A worker: runs inputs `from..to`, printing `START i` before each and `FAIL i why` after a
/// failing one.
fn work(generator: &Generator, from: u64, to: u64) -> i32 {
    std::panic::set_hook(Box::new(|_| {}));
    // The harness's own test: a worker that dies on this input, as a stack overflow would.
    let abort_at: Option<u64> = std::env::var("PLAN_FUZZ_ABORT_AT")
        .ok()
        .and_then(|i| i.parse().ok());
    let registry = plan_tools::builtin_registry();
    let outcome = std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(scope, || {
                let mut stdout = std::io::stdout().lock();
                for i in from..to {
                    let (text, format) = generator.input(i);
                    if writeln!(stdout, "START {i}")
                        .and_then(|()| stdout.flush())
                        .is_err()
                    {
                        return;
                    }
                    if abort_at == Some(i) {
                        std::process::abort();
                    }
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        check(&text, format, &registry)
                    }));
                    let failure = match result {
                        Ok(Ok(())) => None,
                        Ok(Err(message)) => Some(message),
                        Err(panic) => Some(format!("panic: {}", panic_message(&*panic))),
                    };
                    let failure = failure.or_else(|| {
                        let rss = resident_bytes();
                        (rss > MEMORY_LIMIT_BYTES)
                            .then(|| format!("resident memory reached {} MiB", rss >> 20))
                    });
                    if let Some(message) = failure {
                        let line = message.replace('\n', " ");
                        let line: String = line.chars().take(300).collect();
                        let _ = writeln!(stdout, "FAIL {i} {line}");
                    }
                }
                let _ = writeln!(stdout, "DONE");
                let _ = stdout.flush();
            });
        thread.map(|t| t.join().is_ok())
    });
    match outcome {
        Ok(true) => 0,
        _ => 1,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

struct Worker {
    child: Child,
    /// The input it is on.
    current: Option<u64>,
    to: u64,
    last_heard: Instant,
}

enum Line {
    Text(usize, String),
    Closed(usize),
}

/// The parent: splits the inputs among workers, replaces dead or stuck ones, and reports.
fn lead(options: &Options) -> i32 {
    let started = Instant::now();
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => {
            eprintln!("plan-fuzz: cannot find its own executable: {error}");
            return 2;
        }
    };
    let (send, receive) = mpsc::channel::<Line>();
    let spawn = |slot: usize, from: u64, to: u64| -> std::io::Result<Worker> {
        let mut child = Command::new(&exe)
            .args(["--seed", &options.seed.to_string()])
            .arg("--fixtures")
            .arg(&options.fixtures)
            .args(["--worker", &from.to_string(), &to.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let send = send.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(line) => {
                        if send.send(Line::Text(slot, line)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = send.send(Line::Closed(slot));
        });
        Ok(Worker {
            child,
            current: None,
            to,
            last_heard: Instant::now(),
        })
    };
    let per_job = options.inputs.div_ceil(options.jobs);
    let mut workers: Vec<Option<Worker>> = Vec::new();
    for job in 0..options.jobs {
        let from = job * per_job;
        let to = ((job + 1) * per_job).min(options.inputs);
        if from >= to {
            continue;
        }
        match spawn(workers.len(), from, to) {
            Ok(worker) => workers.push(Some(worker)),
            Err(error) => {
                eprintln!("plan-fuzz: cannot start a worker: {error}");
                return 2;
            }
        }
    }
    let mut failures: Vec<(u64, String)> = Vec::new();
    let mut done: u64 = 0;
    let mut next_report = Instant::now() + Duration::from_secs(30);
    while workers.iter().any(Option::is_some) {
        let line = receive.recv_timeout(Duration::from_secs(1));
        let mut ended: Option<(usize, String)> = None;
        match line {
            Ok(Line::Text(slot, text)) => {
                if let Some(worker) = workers[slot].as_mut() {
                    worker.last_heard = Instant::now();
                    if let Some(i) = text.strip_prefix("START ") {
                        worker.current = i.parse().ok();
                        done += 1;
                    } else if let Some(rest) = text.strip_prefix("FAIL ") {
                        let (i, why) = rest.split_once(' ').unwrap_or((rest, ""));
                        failures.push((i.parse().unwrap_or(0), why.to_owned()));
                    } else if text == "DONE" {
                        worker.current = None;
                    }
                }
            }
            Ok(Line::Closed(slot)) => {
                if let Some(worker) = workers[slot].as_mut() {
                    let status = worker.child.wait();
                    let clean = status.as_ref().is_ok_and(|s| s.success());
                    if !(clean && worker.current.is_none()) {
                        ended = Some((slot, format!("worker died ({status:?})")));
                    } else {
                        workers[slot] = None;
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        for (slot, worker) in workers.iter_mut().enumerate() {
            if let Some(w) = worker
                && ended.is_none()
                && w.last_heard.elapsed() > STUCK
            {
                let _ = w.child.kill();
                ended = Some((slot, format!("stuck for over {STUCK:?}")));
            }
        }
        if let Some((slot, why)) = ended
            && let Some(mut worker) = workers[slot].take()
        {
            let _ = worker.child.kill();
            let _ = worker.child.wait();
            if let Some(i) = worker.current {
                failures.push((i, why));
                if i + 1 < worker.to {
                    match spawn(slot, i + 1, worker.to) {
                        Ok(new) => workers[slot] = Some(new),
                        Err(error) => {
                            eprintln!("plan-fuzz: cannot restart a worker: {error}");
                            return 2;
                        }
                    }
                }
            }
        }
        if Instant::now() > next_report {
            eprintln!(
                "plan-fuzz: {done} inputs, {} failures, {:.0?}",
                failures.len(),
                started.elapsed()
            );
            next_report = Instant::now() + Duration::from_secs(30);
        }
    }
    let generator = match read_corpus(&options.fixtures) {
        Ok(corpus) => Generator::new(corpus, options.seed),
        Err(_) => return 2,
    };
    failures.sort();
    if !failures.is_empty() {
        let _ = std::fs::create_dir_all(&options.out);
    }
    for (i, why) in &failures {
        let (text, format) = generator.input(*i);
        let ext = match format {
            Format::Json => "json",
            Format::Yaml => "yaml",
        };
        let path = options
            .out
            .join(format!("failure-{}-{i}.{ext}", options.seed));
        let _ = std::fs::write(&path, text);
        eprintln!("FAIL input {i} ({}): {why}", path.display());
    }
    println!(
        "fuzz: {done} inputs (seed {}), {} failures, in {:.1?}",
        options.seed,
        failures.len(),
        started.elapsed()
    );
    i32::from(!failures.is_empty() || done < options.inputs)
}
