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
    /// Wraps a plan's text; `name` is the file name shown in diagnostics. A byte-order mark
    /// (editors on Windows write one) is dropped: it is not part of the document.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let mut text = text.into();
        if text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
        Source {
            name: name.into(),
            text: Arc::new(text),
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
        let range = match location {
            Location::Path { path, key: false } => map().value(path),
            Location::Path { path, key: true } => map().key(path),
            Location::Span(range) => Some(range.clone()),
            Location::Nowhere => None,
        }?;
        // A parser's position may fall inside a character (a column counted in bytes, a
        // one-byte span at a multibyte character): widen it to whole characters.
        let text = self.text.as_str();
        let mut start = range.start.min(text.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = range.end.clamp(start, text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        Some(start..end)
    }

    /// The path a location names: its own, or the path of the value (or key) a text range
    /// starts in. For a reader of the problem who sees no text, as a model does.
    pub fn path_of(&self, location: &Location) -> Option<PlanPath> {
        match location {
            Location::Path { path, .. } => Some(path.clone()),
            Location::Span(range) => self
                .map
                .get_or_init(|| SourceMap::build(&self.text))
                .path_at(range.start),
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
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    /// The issue as a miette diagnostic that shows this source.
    pub fn diagnostic(&self, issue: &Issue) -> PlanDiagnostic {
        let label_range =
            |location: &Location| self.range(location).map(|range| self.first_line(range));
        let mut spans: Vec<(Range<usize>, &str)> = Vec::new();
        if let Some(range) = label_range(&issue.location) {
            spans.push((range, &issue.label));
        }
        for (location, label) in &issue.related {
            if let Some(range) = label_range(location) {
                spans.push((range, label));
            }
        }
        let position = spans
            .first()
            .map(|(range, _)| self.line_column(range.start));
        let whole =
            || DiagnosticSource::Whole(NamedSource::new(self.name.clone(), self.text.clone()));
        let (source, spans) = match (spans.first(), position) {
            (Some((primary, _)), Some((line, column))) => {
                match self.excerpt(primary.clone(), line, column) {
                    Some((excerpt, window)) => {
                        // Only the labels on the excerpt's line can be shown.
                        let shift = excerpt.shift;
                        let spans = spans
                            .into_iter()
                            .filter(|(range, _)| {
                                range.start >= window.start && range.start <= window.end
                            })
                            .map(|(range, label)| {
                                let end = range.end.min(window.end);
                                (
                                    (range.start + shift - window.start)
                                        ..(end + shift - window.start),
                                    label,
                                )
                            })
                            .collect();
                        (DiagnosticSource::Excerpt(excerpt), spans)
                    }
                    None => (whole(), spans),
                }
            }
            _ => (whole(), spans),
        };
        let labels = spans
            .into_iter()
            .enumerate()
            .map(|(i, (range, label))| {
                if i == 0 {
                    LabeledSpan::new_primary_with_span(Some(label.to_owned()), range)
                } else {
                    LabeledSpan::new_with_span(Some(label.to_owned()), range)
                }
            })
            .collect();
        PlanDiagnostic {
            issue: issue.clone(),
            source,
            labels,
            position,
        }
    }

    /// For a location on a very long line (a minified plan), the part of the line around it:
    /// a terminal cannot show the line whole, and miette cannot draw columns past 65,535.
    /// Returns the excerpt and the byte range of the text it shows.
    fn excerpt(
        &self,
        primary: Range<usize>,
        line: usize,
        column: usize,
    ) -> Option<(Excerpt, Range<usize>)> {
        const LONG_LINE: usize = 240;
        const CONTEXT: usize = 80;
        let text = self.text.as_str();
        let line_start = text[..primary.start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[primary.start..]
            .find('\n')
            .map_or(text.len(), |i| primary.start + i);
        if line_end - line_start <= LONG_LINE {
            return None;
        }
        let floor = |mut at: usize| {
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            at
        };
        let start = floor(primary.start.saturating_sub(CONTEXT).max(line_start));
        let end = floor((primary.end.min(primary.start + CONTEXT) + CONTEXT).min(line_end));
        let lead = if start > line_start { "…" } else { "" };
        let tail = if end < line_end { "…" } else { "" };
        let shown = format!("{lead}{}{tail}", &text[start..end]);
        Some((
            Excerpt {
                name: self.name.clone(),
                text: shown,
                line: line - 1,
                skipped_columns: column - 1 - text[start..primary.start].chars().count(),
                shift: lead.len(),
            },
            start..end,
        ))
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

/// The text a diagnostic shows: the whole plan, or one excerpt of a long line.
#[derive(Debug)]
enum DiagnosticSource {
    Whole(NamedSource<Arc<String>>),
    Excerpt(Excerpt),
}

/// Part of one line of the plan, numbered as in the plan.
#[derive(Debug)]
struct Excerpt {
    name: String,
    text: String,
    /// The line's number, from 0.
    line: usize,
    /// Characters of the line before the excerpt.
    skipped_columns: usize,
    /// Bytes the excerpt starts with that are not the plan's (the ellipsis).
    shift: usize,
}

impl SourceCode for DiagnosticSource {
    fn read_span<'a>(
        &'a self,
        span: &miette::SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        match self {
            DiagnosticSource::Whole(source) => {
                source.read_span(span, context_lines_before, context_lines_after)
            }
            DiagnosticSource::Excerpt(excerpt) => {
                let inner =
                    excerpt
                        .text
                        .read_span(span, context_lines_before, context_lines_after)?;
                // miette's column is a byte offset into the excerpt; the plan's is counted in
                // characters, as `PlanDiagnostic::position` counts it.
                let bytes = inner.column().clamp(excerpt.shift, excerpt.text.len());
                let column = excerpt
                    .text
                    .get(excerpt.shift..bytes)
                    .map_or(0, |shown| shown.chars().count());
                Ok(Box::new(miette::MietteSpanContents::new_named(
                    excerpt.name.clone(),
                    inner.data(),
                    *inner.span(),
                    inner.line() + excerpt.line,
                    excerpt.skipped_columns + column,
                    inner.line_count(),
                )))
            }
        }
    }
}

/// An [`Issue`] together with the plan's source, ready for miette to render.
#[derive(Debug)]
pub struct PlanDiagnostic {
    /// The issue.
    pub issue: Issue,
    source: DiagnosticSource,
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
