//! Logs for every binary, configured the same way: human-readable text by default, one JSON
//! object a line for log collectors, filtered with `RUST_LOG` syntax. Logs go to stderr so that
//! commands that print results (`simulate`, `crdgen`) keep stdout for them.
//!
//! A text record is one line whatever it holds: a line break inside it (a user name, a CSR's
//! requester, an apiserver's error text: strings others choose) is written as `\n` or `\r`,
//! so that nobody can forge a log line of their own. JSON escapes them already.

use std::io::IsTerminal;

use thiserror::Error;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Flags for logging.
#[derive(clap::Args, Clone, Debug)]
pub struct LogArgs {
    /// `text` for people, `json` for log collectors (one object a line).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to log, in `RUST_LOG` syntax: `info`, `debug`, `info,kube=debug`, ...
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_level: String,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Error)]
pub enum LogError {
    #[error(
        "invalid log level {filter:?} (--log-level / RUST_LOG; e.g. info or info,kube=debug): {source}"
    )]
    Filter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("logging is already set up: {0}")]
    AlreadySet(String),
}

/// Installs the global subscriber for `args`, writing to stderr. Call once, first thing.
pub fn init(args: &LogArgs) -> Result<(), LogError> {
    let ansi = std::io::stderr().is_terminal();
    let subscriber = subscriber(args, std::io::stderr, ansi)?;
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| LogError::AlreadySet(e.to_string()))
}

/// The filter for `--log-level`; an empty value means `info`.
pub fn filter(log_level: &str) -> Result<EnvFilter, LogError> {
    let directives = match log_level.trim() {
        "" => "info",
        s => s,
    };
    EnvFilter::builder()
        .parse(directives)
        .map_err(|source| LogError::Filter {
            filter: log_level.to_string(),
            source,
        })
}

fn subscriber<W>(
    args: &LogArgs,
    writer: W,
    ansi: bool,
) -> Result<Box<dyn tracing::Subscriber + Send + Sync>, LogError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter(&args.log_level)?);
    Ok(match args.log_format {
        LogFormat::Text => Box::new(
            builder
                .with_writer(OneLine(writer))
                .with_ansi(ansi)
                .finish(),
        ),
        LogFormat::Json => Box::new(
            builder
                .with_writer(writer)
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(true)
                .finish(),
        ),
    })
}

/// Makes writers that keep a record on one line: the formatter writes a whole record, ending
/// in its line break, in one `write_all`; every other line break in it is escaped.
struct OneLine<M>(M);

impl<'w, M: MakeWriter<'w>> MakeWriter<'w> for OneLine<M> {
    type Writer = OneLineWriter<M::Writer>;
    fn make_writer(&'w self) -> Self::Writer {
        OneLineWriter(self.0.make_writer())
    }
}

struct OneLineWriter<W>(W);

impl<W: std::io::Write> std::io::Write for OneLineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (body, end) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, &b"\n"[..]),
            None => (buf, &b""[..]),
        };
        if !body.contains(&b'\n') && !body.contains(&b'\r') {
            self.0.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut out = Vec::with_capacity(buf.len() + 16);
        for &b in body {
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b => out.push(b),
            }
        }
        out.extend_from_slice(end);
        self.0.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;
    use std::sync::{Arc, Mutex};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buf {
        type Writer = Buf;
        fn make_writer(&'w self) -> Buf {
            self.clone()
        }
    }

    fn logged(format: LogFormat, level: &str) -> String {
        let args = LogArgs {
            log_format: format,
            log_level: level.into(),
        };
        let buf = Buf::default();
        let sub = subscriber(&args, buf.clone(), false).unwrap();
        tracing::subscriber::with_default(sub, || {
            tracing::info!(placement = "p1", "scheduled");
            tracing::debug!("hidden at info");
        });
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn flags() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.log.log_format, LogFormat::Text);
        let cli = Cli::try_parse_from(["x", "--log-format=json", "--log-level=debug"]).unwrap();
        assert_eq!(cli.log.log_format, LogFormat::Json);
        assert_eq!(cli.log.log_level, "debug");
        assert!(Cli::try_parse_from(["x", "--log-format=xml"]).is_err());
    }

    #[test]
    fn json_is_one_object_a_line_with_the_fields() {
        let out = logged(LogFormat::Json, "info");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["message"], "scheduled");
        assert_eq!(v["placement"], "p1");
    }

    #[test]
    fn text_and_level() {
        let out = logged(LogFormat::Text, "info");
        assert!(
            out.contains("scheduled") && out.contains("placement=\"p1\""),
            "{out}"
        );
        assert!(!out.contains("hidden"), "{out}");
        assert!(logged(LogFormat::Text, "debug").contains("hidden at info"));
        assert!(!logged(LogFormat::Text, "warn").contains("scheduled"));
    }

    /// A name someone else chose, with line breaks: the record stays one line, in text and
    /// in JSON, whether the name is a field, a Display field or part of the message.
    #[test]
    fn a_line_break_in_a_value_cannot_forge_a_log_line() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let args = LogArgs {
                log_format: format,
                log_level: "info".into(),
            };
            let buf = Buf::default();
            let sub = subscriber(&args, buf.clone(), false).unwrap();
            let name = "agent\nERROR forged: cluster-admin granted\r\nINFO x";
            tracing::subscriber::with_default(sub, || {
                tracing::warn!(requester = %name, "refused {name}");
                tracing::warn!(requester = name, "next");
            });
            let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 2, "{format:?}: {out}");
            assert!(
                lines
                    .iter()
                    .all(|l| !l.starts_with("ERROR") && !l.starts_with("INFO x")),
                "{out}"
            );
            assert!(
                lines[0].contains("forged"),
                "the text is kept, escaped: {out}"
            );
        }
    }

    #[test]
    fn a_bad_filter_is_a_clear_error() {
        let e = filter("info,kube=loud").unwrap_err().to_string();
        assert!(e.contains("invalid log level \"info,kube=loud\""), "{e}");
        assert!(e.contains("RUST_LOG"), "{e}");
        assert!(filter("").is_ok());
        assert!(filter("info,kube=debug").is_ok());
    }
}
