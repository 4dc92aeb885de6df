//! Operator cache purges (`POST /admin/cache/purge`, and those announced by other replicas):
//! how many were applied on this replica and how many entries they removed, by what the purge
//! selected. Kept by the cache as running totals and caught up at scrape time.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::cache::PurgeCounts;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct By {
    /// `uri`, `uri_prefix` or `upstream`.
    by: &'static str,
}

#[derive(Default)]
pub(super) struct PurgeFamilies {
    purges: Family<By, Counter>,
    purged: Family<By, Counter>,
}

impl PurgeFamilies {
    pub(super) fn register(&self, r: &mut Registry) {
        // Every kind is exposed from the start (at 0).
        for by in ["uri", "uri_prefix", "upstream"] {
            let _ = (self.purges.get_or_create(&By { by }), self.purged.get_or_create(&By { by }));
        }
        r.register("cache_purges", "Operator cache purges applied on this replica, by selector", self.purges.clone());
        r.register("cache_purged", "Cache entries removed by operator purges, by selector", self.purged.clone());
    }

    /// Brings the counters up to the cache's totals.
    pub(super) fn catch_up(&self, counts: &[PurgeCounts]) {
        for c in counts {
            super::catch_up(&self.purges.get_or_create(&By { by: c.kind }), c.purges);
            super::catch_up(&self.purged.get_or_create(&By { by: c.kind }), c.entries);
        }
    }
}
