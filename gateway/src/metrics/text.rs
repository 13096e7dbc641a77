//! The Prometheus text exposition format, version 0.0.4: just what
//! `/metrics` writes (counters, gauges, histograms with labels).
//!
//! Written by hand: the format is a few line shapes, and the numbers come
//! from plain atomics that a client library's registry would only wrap.

use std::fmt::{Display, Write};

use tether_actors::metrics::HistogramSnapshot;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// An exposition being written.
#[derive(Debug, Default)]
pub struct Text {
    out: String,
}

impl Text {
    /// Starts a family: its `# HELP` and `# TYPE` lines. Its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
        self
    }

    /// One sample line, `name{labels} value`.
    pub fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        value: impl Display,
    ) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape_label(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
        self
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Display) {
        self.family(name, kind, help).sample(name, &[], value);
    }

    /// Unlabelled counters, one a row: name, help, value.
    pub fn counters(&mut self, rows: &[(&str, &str, u64)]) {
        for &(name, help, value) in rows {
            self.single(name, Kind::Counter, help, value);
        }
    }

    /// A histogram family: cumulative `_bucket`s up to `+Inf`, `_sum`, `_count`.
    pub fn histogram(&mut self, name: &str, help: &str, h: &HistogramSnapshot) {
        self.family(name, Kind::Histogram, help);
        let bucket = format!("{name}_bucket");
        for (le, n) in &h.buckets {
            self.sample(&bucket, &[("le", &le.to_string())], n);
        }
        self.sample(&bucket, &[("le", "+Inf")], h.count);
        self.sample(&format!("{name}_sum"), &[], h.sum_seconds);
        self.sample(&format!("{name}_count"), &[], h.count);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// `\` and line feeds are escaped in help text.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `\`, `"` and line feeds are escaped in label values.
fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escapes() {
        let mut t = Text::default();
        t.family("x_total", Kind::Counter, "Things.\nMore \\ things.")
            .sample("x_total", &[("a", "q\"b\\c\nd"), ("b", "2")], 7u64);
        t.single("y", Kind::Gauge, "A gauge.", -3i64);
        assert_eq!(
            t.finish(),
            "# HELP x_total Things.\\nMore \\\\ things.\n\
             # TYPE x_total counter\n\
             x_total{a=\"q\\\"b\\\\c\\nd\",b=\"2\"} 7\n\
             # HELP y A gauge.\n\
             # TYPE y gauge\n\
             y -3\n"
        );
    }

    #[test]
    fn histograms_are_cumulative_and_end_with_inf() {
        let h = HistogramSnapshot {
            buckets: vec![(0.005, 1), (1.0, 3)],
            count: 4,
            sum_seconds: 2.5,
        };
        let mut t = Text::default();
        t.histogram("d_seconds", "Durations.", &h);
        assert_eq!(
            t.finish(),
            "# HELP d_seconds Durations.\n\
             # TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.005\"} 1\n\
             d_seconds_bucket{le=\"1\"} 3\n\
             d_seconds_bucket{le=\"+Inf\"} 4\n\
             d_seconds_sum 2.5\n\
             d_seconds_count 4\n"
        );
    }
}
