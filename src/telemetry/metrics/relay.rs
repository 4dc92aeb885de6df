//! Large results relayed from upstream to client without being buffered or cached (see
//! [`crate::router::Relay`]): how many, how they ended, and how many bytes they carried.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Ended {
    upstream: String,
    /// `complete`, or `cut` (the upstream broke the protocol, went past `max_relay_bytes`,
    /// failed mid-way, or the client went away).
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Named {
    upstream: String,
}

/// The relay series of every upstream.
#[derive(Default)]
pub(super) struct RelayFamilies {
    ended: Family<Ended, Counter>,
    bytes: Family<Named, Counter>,
}

impl RelayFamilies {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "upstream_relayed",
            "Large results relayed to a client unbuffered, by upstream and outcome",
            self.ended.clone(),
        );
        r.register("upstream_relayed_bytes", "Bytes of large results relayed, by upstream", self.bytes.clone());
    }

    /// The handles of upstream `name` (its series exist, at 0, from now on).
    pub(super) fn meter(&self, name: &str) -> RelayMeter {
        let ended = |outcome| self.ended.get_or_create_owned(&Ended { upstream: name.to_owned(), outcome });
        RelayMeter {
            complete: ended("complete"),
            cut: ended("cut"),
            bytes: self.bytes.get_or_create_owned(&Named { upstream: name.to_owned() }),
        }
    }
}

/// One upstream's relay counters.
#[derive(Clone, Debug)]
pub struct RelayMeter {
    complete: Counter,
    cut: Counter,
    bytes: Counter,
}

impl RelayMeter {
    /// `n` more bytes relayed.
    pub fn bytes(&self, n: u64) {
        self.bytes.inc_by(n);
    }

    /// A relay ended: whole, or cut.
    pub fn ended(&self, complete: bool) {
        if complete {
            self.complete.inc()
        } else {
            self.cut.inc()
        };
    }
}
