//! How our binaries write their diagnostics, and a minimal `tracing` subscriber for
//! `libi-nla`.
//!
//! Every diagnostic line names who wrote it and how grave it is, as the front end's own
//! lines do (`libi-mpiexec: warning: ...`): `PROGRAM[@HOST]: LEVEL: message key=value ...`,
//! where LEVEL is `error`, `warning`, `info`, `debug` or `trace`, and an NLA adds the host it
//! serves (as the user named it) once it knows it, so that a line from one of many agents
//! says where it comes from. [`crate::init_tracing`] writes the same lines.
//!
//! [`MinLog`]: events at or above one level, to [`crate::write_stderr`]. No spans, no
//! per-target filters: an NLA that needs those is given `LIBI_LOG` and uses
//! [`crate::init_tracing`]. It keeps the formatting and filtering machinery of
//! `tracing-subscriber` off the NLA's start-up path and out of its resident memory.

use std::fmt::Write as _;
use std::sync::OnceLock;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// The program writing (`libi-nla`, `libi-mpiexec`), set once by [`set_program`].
static PROGRAM: OnceLock<&'static str> = OnceLock::new();
/// The host an NLA serves, set once it knows it ([`set_host`]).
static HOST: OnceLock<String> = OnceLock::new();

/// Name the program in every diagnostic line from now on.
pub fn set_program(name: &'static str) {
    let _ = PROGRAM.set(name);
}

/// Add the host this process serves to every diagnostic line from now on (`libi-nla@n3`).
pub fn set_host(host: &str) {
    let _ = HOST.set(host.to_string());
}

/// The start of a diagnostic line: `PROGRAM[@HOST]: LEVEL: `.
pub fn prefix(level: Level) -> String {
    let program = PROGRAM.get().copied().unwrap_or("libi");
    let word = match level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    };
    match HOST.get() {
        Some(host) => format!("{program}@{host}: {word}: "),
        None => format!("{program}: {word}: "),
    }
}

/// Events up to `max` (`Level::WARN`: warnings and errors), to stderr.
pub struct MinLog {
    max: Level,
}

/// Install [`MinLog`] as the global subscriber for `program`: warnings, or everything to
/// `debug` when `verbose` (what [`crate::init_tracing`] shows without `LIBI_LOG`).
pub fn init(program: &'static str, verbose: bool) {
    set_program(program);
    let max = if verbose { Level::DEBUG } else { Level::WARN };
    let _ = tracing::subscriber::set_global_default(MinLog { max });
}

impl Subscriber for MinLog {
    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        *meta.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::from_level(self.max))
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        crate::write_stderr(line(event).as_bytes());
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// An event as one line: `PROGRAM[@HOST]: LEVEL: message key=value ...\n`.
fn line(event: &Event<'_>) -> String {
    let mut line = Line(prefix(*event.metadata().level()));
    event.record(&mut line);
    line.0.push('\n');
    line.0
}

/// One event's fields: the message first, then ` key=value`.
struct Line(String);

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// [`crate::init_tracing`]'s line format: [`prefix`], then the event's fields as
/// `tracing-subscriber` writes them (the message first). Spans and targets are left out.
pub struct Prefixed;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        writer.write_str(&prefix(*event.metadata().level()))?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// [`MinLog`]'s filter, lines kept instead of written.
    struct Capture(MinLog, Arc<Mutex<Vec<String>>>);

    impl Subscriber for Capture {
        fn enabled(&self, meta: &Metadata<'_>) -> bool {
            self.0.enabled(meta)
        }
        fn new_span(&self, a: &Attributes<'_>) -> Id {
            self.0.new_span(a)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            self.1.lock().unwrap().push(line(event));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn warnings_only_fields_after_the_message() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sub = Capture(MinLog { max: Level::WARN }, lines.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::debug!(node = 3, "not shown");
            tracing::warn!(node = 3, host = %"n1", "lost {}", "it");
            tracing::error!(why = ?"x", "bad");
        });
        let lines = lines.lock().unwrap();
        // No program set in this test process: "libi".
        assert_eq!(
            *lines,
            ["libi: warning: lost it node=3 host=n1\n", "libi: error: bad why=\"x\"\n"]
        );
    }
}
