//! Loading a TOML file into a [`Config`], collecting every error with its location.

use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::Config;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Key path, e.g. `upstream[1].url`.
    pub path: String,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    pub message: String,
}

/// Every problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    pub file: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        writeln!(f, "{}: {n} error{}", self.file, if n == 1 { "" } else { "s" })?;
        for e in &self.errors {
            match e.line {
                Some(line) => writeln!(f, "  {}:{line}: {}: {}", self.file, e.path, e.message)?,
                None => writeln!(f, "  {}: {}: {}", self.file, e.path, e.message)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Reads, parses and validates the file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        file: file.clone(),
        errors: vec![ConfigError { path: String::new(), line: None, message: e.to_string() }],
    })?;
    parse(&text).map_err(|errors| ConfigErrors { file, errors })
}

const SECTIONS: &[&str] =
    &["listen", "admin", "auth", "proxy", "cache", "hub", "log", "telemetry", "cluster", "reload", "upstream"];

/// Like [`load`], but a secret that does not resolve here is not an error: it comes back as
/// a warning (`resmux check` in CI, where no secrets are set). Everything else is checked.
pub fn load_without_secrets(path: &Path) -> Result<(Config, Vec<ConfigError>), ConfigErrors> {
    match load(path) {
        Ok(config) => Ok((config, Vec::new())),
        Err(ConfigErrors { file, errors }) => {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let Ok(config) = parse_unvalidated(&text) else { return Err(ConfigErrors { file, errors }) };
            let secrets: Vec<(String, String)> = config.secret_problems();
            let (warnings, errors): (Vec<_>, Vec<_>) =
                errors.into_iter().partition(|e| secrets.iter().any(|(p, m)| *p == e.path && *m == e.message));
            if errors.is_empty() { Ok((config, warnings)) } else { Err(ConfigErrors { file, errors }) }
        }
    }
}

/// The config `text` decodes to, without the cross-field rules (for reporting around them).
fn parse_unvalidated(text: &str) -> Result<Config, ()> {
    let table: toml::Table = toml::from_str(text).map_err(|_| ())?;
    toml::Value::Table(table).try_into().map_err(|_| ())
}

/// Parses and validates config text. Each section (and each `[[upstream]]`) is decoded on its
/// own, so one bad section does not hide the errors of the others.
pub fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
    let spans = Spans::new(text);
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| spans.line_at(s.start));
        vec![ConfigError { path: String::new(), line, message: e.message().trim().to_owned() }]
    })?;
    let mut errors = Vec::new();
    let mut config = Config::default();
    for key in table.keys().filter(|k| !SECTIONS.contains(&k.as_str())) {
        errors.push(spans.error(&[key], format!("unknown key `{key}`, expected one of {SECTIONS:?}")));
    }
    section(&table, "listen", &spans, &mut errors, &mut config.listen);
    section(&table, "admin", &spans, &mut errors, &mut config.admin);
    section(&table, "auth", &spans, &mut errors, &mut config.auth);
    section(&table, "proxy", &spans, &mut errors, &mut config.proxy);
    section(&table, "cache", &spans, &mut errors, &mut config.cache);
    section(&table, "hub", &spans, &mut errors, &mut config.hub);
    section(&table, "log", &spans, &mut errors, &mut config.log);
    section(&table, "cluster", &spans, &mut errors, &mut config.cluster);
    section(&table, "telemetry", &spans, &mut errors, &mut config.telemetry);
    section(&table, "reload", &spans, &mut errors, &mut config.reload);
    match table.get("upstream") {
        None => {}
        Some(toml::Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item.clone().try_into() {
                    Ok(up) => config.upstreams.push(up),
                    Err(e) => errors.push(spans.error_at_index("upstream", i, de_message(&e))),
                }
            }
        }
        Some(_) => errors.push(spans.error(&["upstream"], "must be an array of tables ([[upstream]])".into())),
    }
    if errors.is_empty() {
        for (path, message) in config.validate() {
            let line = spans.line_of_path(&path);
            errors.push(ConfigError { path, line, message });
        }
    }
    if errors.is_empty() { Ok(config) } else { Err(errors) }
}

fn section<T: DeserializeOwned>(
    table: &toml::Table,
    key: &str,
    spans: &Spans,
    errors: &mut Vec<ConfigError>,
    out: &mut T,
) {
    if let Some(value) = table.get(key) {
        match value.clone().try_into() {
            Ok(v) => *out = v,
            Err(e) => errors.push(spans.error(&[key], de_message(&e))),
        }
    }
}

fn de_message(e: &toml::de::Error) -> String {
    e.message().trim().to_owned()
}

/// Maps key paths to line numbers using toml_edit's spans.
struct Spans<'a> {
    text: &'a str,
    doc: Option<toml_edit::Document<&'a str>>,
}

impl<'a> Spans<'a> {
    fn new(text: &'a str) -> Self {
        Self { text, doc: toml_edit::Document::parse(text).ok() }
    }

    fn line_at(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].bytes().filter(|b| *b == b'\n').count() + 1
    }

    fn error(&self, keys: &[&str], message: String) -> ConfigError {
        let line = self.span_of(keys, None).map(|o| self.line_at(o));
        ConfigError { path: keys.join("."), line, message }
    }

    fn error_at_index(&self, key: &str, index: usize, message: String) -> ConfigError {
        let line = self.span_of(&[key], Some(index)).map(|o| self.line_at(o));
        ConfigError { path: format!("{key}[{index}]"), line, message }
    }

    /// Line of a path such as `upstream[1].url` or `listen.addr`.
    fn line_of_path(&self, path: &str) -> Option<usize> {
        let (head, rest) = path.split_once('.').unwrap_or((path, ""));
        let (key, index) = match head.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse().ok()),
            None => (head, None),
        };
        let doc = self.doc.as_ref()?;
        let item = doc.as_table().get(key)?;
        let table = match index {
            Some(i) => item.as_array_of_tables()?.get(i)?,
            None => item.as_table()?,
        };
        let field = rest.split(['.', '[']).next().filter(|f| !f.is_empty());
        let offset = match field.and_then(|f| table.key(f)) {
            Some(k) => k.span().map(|s| s.start),
            None => table.span().map(|s| s.start),
        };
        offset.map(|o| self.line_at(o))
    }

    fn span_of(&self, keys: &[&str], index: Option<usize>) -> Option<usize> {
        let doc = self.doc.as_ref()?;
        let key = doc.as_table().key(keys[0])?;
        match index {
            None => key.span().map(|s| s.start),
            Some(i) => {
                let tables = doc.as_table().get(keys[0])?.as_array_of_tables()?;
                tables.get(i)?.span().map(|s| s.start)
            }
        }
    }
}
