//! A minimal `tracing` subscriber for `libi-nla`: events at or above one level, written as
//! `LEVEL message key=value ...` lines to [`crate::write_stderr`] (the format of
//! [`crate::init_tracing`] without colours). No spans, no per-target filters: an NLA that
//! needs those is given `LIBI_LOG` and uses [`crate::init_tracing`]. It keeps the
//! formatting and filtering machinery of `tracing-subscriber` off the NLA's start-up path
//! and out of its resident memory.

use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Events up to `max` (`Level::WARN`: warnings and errors), to stderr.
pub struct MinLog {
    max: Level,
}

/// Install [`MinLog`] as the global subscriber: warnings, or everything to `debug` when
/// `verbose` (what [`crate::init_tracing`] shows without `LIBI_LOG`).
pub fn init(verbose: bool) {
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

/// An event as one line: `LEVEL message key=value ...\n`.
fn line(event: &Event<'_>) -> String {
    let mut line = Line(String::with_capacity(128));
    let _ = write!(line.0, "{:>5} ", event.metadata().level());
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
        assert_eq!(*lines, [" WARN lost it node=3 host=n1\n", "ERROR bad why=\"x\"\n"]);
    }
}
