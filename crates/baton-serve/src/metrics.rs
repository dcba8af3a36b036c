//! Prometheus metrics: job counts by status (from the store), active and
//! queued jobs, and histograms of queue wait and run time (since start).

use std::fmt::Write;
use std::sync::{Mutex, PoisonError};

use crate::model::{Counts, JobStatus};

/// Histogram bucket bounds, in seconds.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0, 900.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", self.counts[i]);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// Metrics kept in memory by one service process.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    queue_wait: Histogram,
    run: Histogram,
    ended: Vec<(JobStatus, u64)>,
}

impl Metrics {
    /// A job ended after waiting `queue_wait_ms` and running `run_ms`.
    pub fn finished(&self, queue_wait_ms: i64, run_ms: i64, status: JobStatus) {
        let mut m = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        m.queue_wait.observe(queue_wait_ms.max(0) as f64 / 1000.0);
        if status != JobStatus::Cancelled || run_ms > 0 {
            m.run.observe(run_ms.max(0) as f64 / 1000.0);
        }
        match m.ended.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => m.ended.push((status, 1)),
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self, by_status: &[(JobStatus, u64)], counts: Counts, capacity: u64) -> String {
        let m = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        out.push_str("# HELP baton_jobs Jobs in the store, by status.\n# TYPE baton_jobs gauge\n");
        for st in JobStatus::ALL {
            let n = by_status
                .iter()
                .find(|(s, _)| *s == st)
                .map_or(0, |(_, n)| *n);
            let _ = writeln!(out, "baton_jobs{{status=\"{}\"}} {n}", st.as_str());
        }
        out.push_str("# HELP baton_jobs_ended_total Jobs that ended since the service started, by status.\n# TYPE baton_jobs_ended_total counter\n");
        for st in JobStatus::ALL.into_iter().filter(|s| s.is_final()) {
            let n = m
                .ended
                .iter()
                .find(|(s, _)| *s == st)
                .map_or(0, |(_, n)| *n);
            let _ = writeln!(
                out,
                "baton_jobs_ended_total{{status=\"{}\"}} {n}",
                st.as_str()
            );
        }
        let _ = writeln!(out, "# HELP baton_jobs_active Jobs running now.\n# TYPE baton_jobs_active gauge\nbaton_jobs_active {}", counts.running);
        let _ = writeln!(out, "# HELP baton_jobs_queued Jobs waiting for a slot.\n# TYPE baton_jobs_queued gauge\nbaton_jobs_queued {}", counts.queued);
        let _ = writeln!(out, "# HELP baton_capacity Jobs that can run at once.\n# TYPE baton_capacity gauge\nbaton_capacity {capacity}");
        m.queue_wait.render(
            &mut out,
            "baton_job_queue_wait_seconds",
            "Time from submission to a slot.",
        );
        m.run.render(
            &mut out,
            "baton_job_run_seconds",
            "Time from a slot to the job's end.",
        );
        out
    }
}
