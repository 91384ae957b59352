//! The work queue's metrics: client-go's workqueue series, each share's waiting keys, and the
//! passes per key.

use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::{Ticket, WorkQueue};

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// client-go's periodic gauges: the seconds of work under way that no worker has finished,
    /// summed over the keys being worked on, and the longest of them.
    pub fn measure_unfinished(&self) {
        let now = Instant::now();
        let (total, longest) = {
            let state = self.state();
            state.active.values().fold((0.0, 0.0), |(total, longest): (f64, f64), since| {
                let seconds = now.saturating_duration_since(*since).as_secs_f64();
                (total + seconds, longest.max(seconds))
            })
        };
        let m = crate::metrics::metrics();
        for labels in self.exported() {
            m.queue_unfinished.get_or_create(labels).set(total);
            m.queue_longest.get_or_create(labels).set(longest);
        }
    }

    pub(super) fn measure(&self, depth: usize, added: bool) {
        let m = crate::metrics::metrics();
        for labels in self.exported() {
            m.queue_depth.get_or_create(labels).set(i64::try_from(depth).unwrap_or(i64::MAX));
            if added {
                m.queue_adds.get_or_create(labels).inc();
            }
        }
    }

    /// Observes `elapsed` in one of the queue's duration histograms.
    pub(super) fn observe(
        &self,
        elapsed: Option<Duration>,
        histogram: impl Fn(
            &crate::metrics::Metrics,
        ) -> &prometheus_client::metrics::family::Family<
            crate::metrics::QueueLabels,
            prometheus_client::metrics::histogram::Histogram,
            fn() -> prometheus_client::metrics::histogram::Histogram,
        >,
    ) {
        let Some(elapsed) = elapsed else {
            return;
        };
        for labels in self.exported() {
            histogram(crate::metrics::metrics())
                .get_or_create(labels)
                .observe(elapsed.as_secs_f64());
        }
    }

    pub(super) fn measure_share(&self, ticket: &Ticket, waiting: usize) {
        let Some(labels) = &self.inner.name else {
            return;
        };
        let labels = crate::metrics::ShareLabels {
            name: labels.name.clone(),
            lane: ticket.lane.name().to_string(),
            namespace: ticket.share.clone(),
        };
        crate::metrics::metrics()
            .queue_share_waiting
            .get_or_create(&labels)
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    /// Takes the passes (`take_passes`) into `csi_pv_controller_passes_per_key`, and returns the
    /// keys that got at least `hot` of them.
    pub fn observe_passes(&self, hot: u32) -> Vec<(K, u32)> {
        let passes = self.take_passes();
        if let Some(labels) = &self.inner.name {
            let histogram = crate::metrics::metrics().passes_per_key.get_or_create(labels).clone();
            for count in passes.values() {
                histogram.observe(f64::from(*count));
            }
        }
        passes.into_iter().filter(|(_, n)| *n >= hot).collect()
    }
}
