//! What the hub does with a change: invalidate the cache, wake the listeners that watch it,
//! and tell the other replicas (when this replica's feed saw it).

use super::{Hub, Notice, Topic};
use crate::cache::CachedMethod;
use crate::cluster::Event;
use crate::mcp::Capability;
use crate::mcp::notify::Change;
use crate::upstream::catalog::Named;

impl Hub {
    /// A change announced by upstream `index` to this replica's feed: applied here, and
    /// passed on to the other replicas.
    pub(super) fn publish(&self, index: usize, change: &Change) {
        self.apply(index, change);
        if let Some(cluster) = &self.0.cluster {
            cluster.announce(index, Event::Change(change.clone()));
        }
    }

    /// A change of upstream `index`: invalidate the cache, wake its listeners.
    pub(super) fn apply(&self, index: usize, change: &Change) {
        if let Some(cluster) = &self.0.cluster {
            cluster.note_change(index, Some(change));
        }
        let epochs = self.0.cache.epochs();
        let up = index as u32;
        let (topic, pend) = match change {
            Change::Updated(uri) => {
                epochs.uri_changed(up, uri);
                let Some(out) = self.0.lineup.load().uri_out(index, uri) else { return };
                (Topic::Uri(uri.clone()), Notice::Uri(out.into()))
            }
            Change::ListChanged(kind) => {
                for list in kind.lists() {
                    epochs.list_changed(up, CachedMethod::from(*list));
                }
                if let Some(upstream) = self.upstream(index) {
                    match kind {
                        Capability::Resources => {}
                        Capability::Tools => upstream.catalog().forget(Named::Tools),
                        Capability::Prompts => upstream.catalog().forget(Named::Prompts),
                    }
                }
                (Topic::List(*kind), Notice::List(*kind))
            }
        };
        // The topic's snapshot, taken under the lock; the pushes happen with it released.
        let watchers = self.0.registry.lock().expect("registry").watchers(index, topic);
        let now = std::time::Instant::now();
        let slow = self.0.config.slow_listener_timeout;
        let mut stalled = Vec::new();
        for l in watchers.iter().flat_map(|w| w.iter()) {
            // A listener whose connection took nothing for the slow-listener time is dropped,
            // so that it holds nothing more for a client that is not there (its queue is
            // bounded either way, and no one else waits on it).
            if let Some(since) = l.push_at(&pend, now)
                && now.saturating_duration_since(since) > slow
                && l.drops_when_stalled()
            {
                stalled.push(l.clone());
            }
        }
        for l in stalled {
            tracing::info!(listener = l.id, "closing a listener that stopped reading");
            l.close();
            self.unregister(l.id);
        }
    }

    /// Upstream `index`'s feed lost its stream: here and on the other replicas, its cache
    /// entries go stale now.
    pub(super) fn stream_lost(&self, index: usize) {
        self.forget(index);
        if let Some(cluster) = &self.0.cluster {
            cluster.announce(index, Event::Lost);
        }
    }

    /// What changed at upstream `index` is unknown: its cache entries go stale now.
    pub(super) fn forget(&self, index: usize) {
        if let Some(cluster) = &self.0.cluster {
            cluster.note_change(index, None);
        }
        self.0.cache.epochs().stream_lost(index as u32);
        if let Some(upstream) = self.upstream(index) {
            upstream.catalog().forget_all();
        }
    }

    /// Upstream `index`'s feed is back after a loss: here and on the other replicas, its
    /// listeners learn that everything they watch there may have changed.
    pub(super) fn resync(&self, index: usize) {
        self.resync_local(index);
        if let Some(cluster) = &self.0.cluster {
            cluster.announce(index, Event::Resync);
        }
    }

    /// [`Hub::resync`] on this replica alone.
    pub(super) fn resync_local(&self, index: usize) {
        self.forget(index);
        self.notify_topics(index);
    }

    /// Tells every listener of upstream slot `index` that everything it watches there may
    /// have changed: `resources/updated` for its URIs, `list_changed` for its lists.
    pub(super) fn notify_topics(&self, index: usize) {
        self.notify_topics_in(&self.0.lineup.load(), index);
    }

    /// [`Hub::notify_topics`] with URIs in the downstream form of `lineup`.
    pub(super) fn notify_topics_in(&self, lineup: &super::Lineup, index: usize) {
        let all = self.0.registry.lock().expect("registry").all();
        for listener in &all {
            let changes: Vec<Notice> = listener
                .topics()
                .iter()
                .filter(|(u, _)| *u == index)
                .filter_map(|(_, t)| match t {
                    Topic::Uri(uri) => Some(Notice::Uri(lineup.uri_out(index, uri)?.into())),
                    Topic::List(kind) => Some(Notice::List(*kind)),
                })
                .collect();
            if !changes.is_empty() {
                listener.push_all(&changes);
            }
        }
    }
}
