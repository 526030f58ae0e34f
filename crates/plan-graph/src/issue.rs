//! Problems found in a plan, and their rendering as miette diagnostics with source labels.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use miette::{Diagnostic, LabeledSpan, NamedSource, Severity as MietteSeverity, SourceCode};

use crate::source::{PlanPath, SourceMap};

/// How bad an [`Issue`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The plan runs, but probably not as meant.
    Warning,
    /// The plan cannot run.
    Error,
}

/// Where an issue is: a path into the document, or a byte range found by the parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A value (or key, when `key` is true) named by its path.
    Path {
        /// The path.
        path: PlanPath,
        /// Point at the key rather than the value.
        key: bool,
    },
    /// A byte range of the text.
    Span(Range<usize>),
    /// Nowhere in particular.
    Nowhere,
}

/// One problem with a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Error or warning.
    pub severity: Severity,
    /// A stable identifier, e.g. `plan::cycle`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// Where.
    pub location: Location,
    /// The label shown at the location.
    pub label: String,
    /// How to fix it.
    pub help: Option<String>,
    /// Other places involved (the first duplicate, the rest of a cycle).
    pub related: Vec<(Location, String)>,
}

impl Issue {
    /// An error at the value of `path`.
    pub fn error(code: &'static str, path: PlanPath, message: impl Into<String>) -> Self {
        Issue {
            severity: Severity::Error,
            code,
            message: message.into(),
            location: Location::Path { path, key: false },
            label: "here".to_owned(),
            help: None,
            related: Vec::new(),
        }
    }

    /// A warning at the value of `path`.
    pub fn warning(code: &'static str, path: PlanPath, message: impl Into<String>) -> Self {
        Issue {
            severity: Severity::Warning,
            ..Issue::error(code, path, message)
        }
    }

    /// Points at the key of the location's path instead of its value.
    #[must_use]
    pub fn at_key(mut self) -> Self {
        if let Location::Path { key, .. } = &mut self.location {
            *key = true;
        }
        self
    }

    /// Sets the label text.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Sets the help text.
    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds a related location.
    #[must_use]
    pub fn related(mut self, path: PlanPath, label: impl Into<String>) -> Self {
        self.related
            .push((Location::Path { path, key: false }, label.into()));
        self
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The plan's text and name, shared by every diagnostic about it.
#[derive(Debug, Clone)]
pub struct Source {
    name: String,
    text: Arc<String>,
    map: Arc<std::sync::OnceLock<SourceMap>>,
}

impl Source {
    /// Wraps a plan's text; `name` is the file name shown in diagnostics.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Source {
            name: name.into(),
            text: Arc::new(text.into()),
            map: Arc::default(),
        }
    }

    /// The file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The byte range of a location, built on first use.
    pub fn range(&self, location: &Location) -> Option<Range<usize>> {
        let map = || self.map.get_or_init(|| SourceMap::build(&self.text));
        match location {
            Location::Path { path, key: false } => map().value(path),
            Location::Path { path, key: true } => map().key(path),
            Location::Span(range) => Some(range.clone()),
            Location::Nowhere => None,
        }
    }

    pub(crate) fn key_near(&self, name: &str, offset: usize) -> Option<Range<usize>> {
        self.map
            .get_or_init(|| SourceMap::build(&self.text))
            .key_near(name, offset)
    }

    /// Line (1-based) and column (1-based, in characters) of a byte offset.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    /// The issue as a miette diagnostic that shows this source.
    pub fn diagnostic(&self, issue: &Issue) -> PlanDiagnostic {
        let label_range =
            |location: &Location| self.range(location).map(|range| self.first_line(range));
        let mut labels = Vec::new();
        if let Some(range) = label_range(&issue.location) {
            labels.push(LabeledSpan::new_primary_with_span(
                Some(issue.label.clone()),
                range,
            ));
        }
        for (location, label) in &issue.related {
            if let Some(range) = label_range(location) {
                labels.push(LabeledSpan::new_with_span(Some(label.clone()), range));
            }
        }
        let position = labels.first().map(|l| self.line_column(l.offset()));
        PlanDiagnostic {
            issue: issue.clone(),
            source: NamedSource::new(self.name.clone(), self.text.clone()),
            labels,
            position,
        }
    }

    /// Shortens a range that spans lines (a whole mapping) to the rest of its first line.
    fn first_line(&self, range: Range<usize>) -> Range<usize> {
        let text = &self.text[range.clone()];
        match text.find('\n') {
            Some(newline) => range.start..range.start + text[..newline].trim_end().len(),
            None => range,
        }
    }
}

/// An [`Issue`] together with the plan's source, ready for miette to render.
#[derive(Debug)]
pub struct PlanDiagnostic {
    /// The issue.
    pub issue: Issue,
    source: NamedSource<Arc<String>>,
    labels: Vec<LabeledSpan>,
    position: Option<(usize, usize)>,
}

impl PlanDiagnostic {
    /// Line and column (1-based) of the primary label, if the issue has a location.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.position
    }
}

impl fmt::Display for PlanDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.issue.message)
    }
}

impl std::error::Error for PlanDiagnostic {}

impl Diagnostic for PlanDiagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.issue.code))
    }

    fn severity(&self) -> Option<MietteSeverity> {
        Some(match self.issue.severity {
            Severity::Warning => MietteSeverity::Warning,
            Severity::Error => MietteSeverity::Error,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.issue
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        if self.labels.is_empty() {
            None
        } else {
            Some(&self.source)
        }
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            None
        } else {
            Some(Box::new(self.labels.iter().cloned()))
        }
    }
}
