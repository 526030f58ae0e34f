//! Where a plan and its variables come from when a person names them: a file, stdin, or a
//! plan stored in the ledger; a variables file and values given one by one. Every front-end
//! that takes a plan by name reads it here, so that a stored plan keeps its author and its
//! folder rules wherever it is run from.

use std::path::{Path, PathBuf};

use plan_graph::{Format, InvalidPlan, Source, load_variables};
use serde_json::{Map, Value};

use crate::{Author, Inputs, Ledger, LifecycleError, PlanText, StoredSource};

/// Why a plan or its variables could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The plan could not be read from stdin.
    #[error("cannot read the plan from stdin: {0}")]
    Stdin(#[source] std::io::Error),
    /// The plan file exists but could not be read.
    #[error("cannot read plan `{}`: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Neither a file nor a stored plan has this name.
    #[error("cannot read plan `{0}`: no such file, and no stored plan has that id")]
    NoSuchPlan(String),
    /// Only a stored plan was asked for, and there is none with this id.
    #[error("no stored plan has the id `{0}`")]
    NotStored(String),
    /// The ledger could not be read for a stored plan.
    #[error(transparent)]
    Ledger(#[from] LifecycleError),
    /// The variables file could not be read.
    #[error("cannot read variables file `{}`: {source}", path.display())]
    VariablesFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The variables file is not one object of NAME: VALUE (its issues say where).
    #[error("{} is not a valid variables file: it must hold one object of NAME: VALUE", .0.plan_source.name())]
    InvalidVariables(Box<InvalidPlan>),
    /// A variable given both as text and as JSON.
    #[error("variable `{0}` is given both as text and as JSON; give it once")]
    GivenTwice(String),
    /// A working folder that does not resolve, or is not a folder.
    #[error("{}: {why}", path.display())]
    Folder {
        /// The folder as given.
        path: PathBuf,
        /// Why it cannot be used.
        why: String,
    },
}

/// A plan named by a person: a file, `-` for stdin (JSON or YAML), or the id of a plan stored
/// in the ledger (a file of that name wins unless `stored_only`).
#[derive(Debug, Clone)]
pub struct PlanInput {
    /// The file, `-`, or the stored plan's id.
    pub path: PathBuf,
    /// Only the ledger's plan registry is looked in (a model's plan run by its id).
    pub stored_only: bool,
}

impl PlanInput {
    fn is_stdin(&self) -> bool {
        self.path == Path::new("-")
    }

    /// Whether this names a file or stdin rather than a stored plan.
    fn is_text(&self) -> bool {
        !self.stored_only && (self.is_stdin() || self.path.exists())
    }

    /// The plan's text, its format and its id when it names none: a file's name without its
    /// extension, `stdin` for `-` (which is read from `stdin`), a stored plan's id as given
    /// (`release.v2`, not `release`).
    pub fn read(
        &self,
        ledger: &Ledger,
        stdin: &mut dyn std::io::Read,
    ) -> Result<PlanText, InputError> {
        let id = self.path.to_string_lossy();
        let text = |(source, format)| PlanText {
            source,
            format,
            fallback_id: self.default_id(),
        };
        let kept = |stored: StoredSource| PlanText {
            source: stored.source,
            format: stored.format,
            fallback_id: id.clone().into_owned(),
        };
        if self.stored_only {
            return stored(&id, ledger)?
                .map(kept)
                .ok_or_else(|| InputError::NotStored(id.clone().into_owned()));
        }
        if self.is_stdin() {
            let read = read_bounded(stdin).map_err(InputError::Stdin)?;
            let format = crate::format_of_text(&read);
            return Ok(text((Source::new("<stdin>", read), format)));
        }
        match std::fs::File::open(&self.path).and_then(|mut file| read_bounded(&mut file)) {
            Ok(read) => Ok(text((
                Source::new(self.path.display().to_string(), read),
                Format::from_path(&self.path),
            ))),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => stored(&id, ledger)?
                .map(kept)
                .ok_or_else(|| InputError::NoSuchPlan(id.clone().into_owned())),
            Err(source) => Err(InputError::Read {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Who wrote the plan: the author kept with a stored plan (a model's, an MCP client's),
    /// the operator for a file or stdin. A stored plan runs under its author's policy, not
    /// with the powers of whoever runs it.
    pub fn author(&self, ledger: &Ledger) -> Result<Author, InputError> {
        if self.is_text() {
            return Ok(Author::Operator);
        }
        Ok(stored(&self.path.to_string_lossy(), ledger)?
            .map_or(Author::Operator, |stored| stored.author))
    }

    /// The plan's id when it names none: the file name without extension (`stdin` for `-`).
    /// A character of a file's name that would not show as itself (`plan::invalid_id` refuses
    /// it in an id the plan names) is `_`.
    fn default_id(&self) -> String {
        if self.is_stdin() {
            return "stdin".to_owned();
        }
        self.path.file_stem().map_or_else(
            || "plan".to_owned(),
            |stem| {
                let stem = stem.to_string_lossy();
                stem.replace(plan_types::is_unprintable, "_")
            },
        )
    }

    /// Where a run of this plan runs its programs: `given`, else the folder of the plan file
    /// (so that a plan's relative paths mean the same from any directory), else none (the
    /// current directory: a plan from stdin or the ledger). Absolute, so that a resume finds
    /// it again.
    pub fn folder(&self, given: Option<&Path>) -> Result<Option<PathBuf>, InputError> {
        let dir = match given {
            Some(dir) => dir.to_path_buf(),
            None if !self.stored_only && !self.is_stdin() && self.path.is_file() => {
                match self.path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                    _ => PathBuf::from("."),
                }
            }
            None => return Ok(None),
        };
        resolve_folder(&dir).map(Some)
    }
}

/// `dir` from the root, checked to be a folder.
pub fn resolve_folder(dir: &Path) -> Result<PathBuf, InputError> {
    let why = |why: String| InputError::Folder {
        path: dir.to_path_buf(),
        why,
    };
    let absolute = std::fs::canonicalize(dir).map_err(|error| why(error.to_string()))?;
    if !absolute.is_dir() {
        return Err(why("not a folder".to_owned()));
    }
    Ok(absolute)
}

/// Reads text up to one byte past the largest plan: enough for the loader to say a larger one
/// is too large, without reading a file or a stream of any size whole first. What is cut
/// there is kept as it reads (a character cut in two is not bad UTF-8: the text is too large).
fn read_bounded(reader: &mut dyn std::io::Read) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let limit = plan_graph::MAX_PLAN_BYTES as u64 + 1;
    reader.take(limit).read_to_end(&mut bytes)?;
    if bytes.len() > plan_graph::MAX_PLAN_BYTES {
        // Still past the bound: a cut character becomes U+FFFD, no shorter than it was.
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    String::from_utf8(bytes)
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))
}

/// The stored plan `id`, if there is a ledger and it has one.
fn stored(id: &str, ledger: &Ledger) -> Result<Option<StoredSource>, LifecycleError> {
    if !ledger.exists() {
        return Ok(None);
    }
    crate::stored_source(&ledger.open()?, id)
}

/// A run's variables as a person gives them: a variables file, then values given as text
/// (`NAME=TEXT`) and as JSON over it.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    /// A YAML or JSON file of one object of NAME: VALUE.
    pub file: Option<PathBuf>,
    /// `NAME=TEXT` values (see [`Inputs::text`]).
    pub text: Vec<(String, String)>,
    /// `NAME=JSON` values.
    pub json: Vec<(String, Value)>,
}

impl Variables {
    /// The inputs of a run: the file's values, with those given one by one over them; the
    /// names are checked against the plan's ([`Inputs::check_names`]).
    pub fn read(&self) -> Result<Inputs, InputError> {
        let mut typed = Map::new();
        if let Some(path) = &self.file {
            let text = std::fs::File::open(path)
                .and_then(|mut file| read_bounded(&mut file))
                .map_err(|source| InputError::VariablesFile {
                    path: path.clone(),
                    source,
                })?;
            let source = Source::new(path.display().to_string(), text);
            typed = load_variables(source, Format::from_path(path))
                .map_err(|invalid| InputError::InvalidVariables(Box::new(invalid)))?;
        }
        for (name, _) in &self.text {
            if self.json.iter().any(|(other, _)| other == name) {
                return Err(InputError::GivenTwice(name.clone()));
            }
            typed.remove(name);
        }
        typed.extend(self.json.iter().cloned());
        Ok(Inputs {
            typed,
            text: self.text.clone(),
            check_names: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{InputError, PlanInput, Variables};

    #[test]
    fn a_plan_named_by_a_missing_file_is_looked_for_in_the_ledger_and_said_missing() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = crate::Ledger::new(Some(&dir.path().join("state.db")), None);
        let input = PlanInput {
            path: dir.path().join("nothing.yaml"),
            stored_only: false,
        };
        let error = input.read(&ledger, &mut std::io::empty()).unwrap_err();
        assert!(matches!(error, InputError::NoSuchPlan(_)), "{error}");
        assert_eq!(input.default_id(), "nothing");
        assert_eq!(input.folder(None).unwrap(), None);
        assert!(!ledger.exists(), "reading a plan creates no ledger");
    }

    #[test]
    fn text_past_the_bound_is_too_large_even_cut_in_a_character_and_as_variables() {
        use std::io::Read;
        let max = plan_graph::MAX_PLAN_BYTES;
        // `é` is two bytes: the bound falls between them.
        let mut endless = std::io::repeat(b'a')
            .take(max as u64)
            .chain("é: 1".as_bytes());
        let text = super::read_bounded(&mut endless).unwrap();
        assert!(text.len() > max);
        let source = plan_graph::Source::new("vars.yaml", text);
        let invalid = plan_graph::load_variables(source, plan_graph::Format::Yaml).unwrap_err();
        assert_eq!(invalid.issues[0].code, "plan::too_large");
        assert!(
            invalid.issues[0].message.contains("the variables file is"),
            "{}",
            invalid.issues[0].message
        );
    }

    #[test]
    fn stdin_is_read_for_a_dash_and_its_format_is_guessed() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = crate::Ledger::new(Some(&dir.path().join("state.db")), None);
        let input = PlanInput {
            path: "-".into(),
            stored_only: false,
        };
        let text = input.read(&ledger, &mut "steps: []\n".as_bytes()).unwrap();
        assert_eq!(text.source.name(), "<stdin>");
        assert_eq!(text.format, plan_graph::Format::Yaml);
        assert_eq!(text.fallback_id, "stdin");
    }

    /// A stored plan whose text names no id keeps the id it is stored under, dots and all.
    #[test]
    fn a_stored_plan_s_id_is_the_one_given_not_a_file_stem() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = crate::Ledger::new(Some(&dir.path().join("state.db")), None);
        let text = "steps: []\n".to_owned();
        let stored = crate::stored_plan(
            "release.v2",
            None,
            "release.v2.yaml".into(),
            plan_graph::Format::Yaml,
            text,
            crate::Author::Operator,
        );
        ledger.open().unwrap().add_plan(&stored, false).unwrap();
        let fallback_of = |path: std::path::PathBuf, stored_only: bool| {
            let input = PlanInput { path, stored_only };
            input
                .read(&ledger, &mut std::io::empty())
                .unwrap()
                .fallback_id
        };
        for stored_only in [true, false] {
            assert_eq!(fallback_of("release.v2".into(), stored_only), "release.v2");
        }
        // A file keeps the name of its file without the extension; one that would draw a
        // line of its own gives an id that cannot.
        for (name, id) in [
            ("release.v3.yaml", "release.v3"),
            ("x\n✓ deploy\u{1b}[2J.yaml", "x_✓ deploy_[2J"),
        ] {
            let file = dir.path().join(name);
            std::fs::write(&file, "steps: []\n").unwrap();
            assert_eq!(fallback_of(file, false), id);
        }
    }

    #[test]
    fn a_variable_given_as_text_and_as_json_is_refused_and_text_wins_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vars.yaml");
        std::fs::write(&file, "a: 1\nb: 2\n").unwrap();
        let twice = Variables {
            file: None,
            text: vec![("a".into(), "x".into())],
            json: vec![("a".into(), serde_json::json!(1))],
        };
        assert!(matches!(twice.read(), Err(InputError::GivenTwice(name)) if name == "a"));
        let inputs = Variables {
            file: Some(file),
            text: vec![("a".into(), "x".into())],
            json: Vec::new(),
        }
        .read()
        .unwrap();
        assert_eq!(
            inputs.typed,
            serde_json::json!({"b": 2}).as_object().cloned().unwrap()
        );
        assert_eq!(inputs.text, vec![("a".to_owned(), "x".to_owned())]);
    }
}
