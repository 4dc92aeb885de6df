//! Operator purges in the terms clients see: a namespaced URI, a URI prefix, or an upstream
//! name, mapped onto the upstreams whose entries they name; applied to this replica's cache,
//! then (with `[cluster]`) to the shared tier and the other replicas.

use super::namespace::URI_SEP;
use super::{Router, Routing};
use crate::cache::Target;
use crate::cluster::ClusterError;

/// What an operator asks to purge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeRequest {
    /// Reads of one URI, as clients see it (namespaced when upstreams are prefixed).
    Uri(String),
    /// Reads of every URI, as clients see it, that starts with this.
    UriPrefix(String),
    /// Everything cached from the upstream of this name: reads and lists.
    Upstream(String),
}

impl PurgeRequest {
    /// `uri`, `uri_prefix` or `upstream`: the metric label and the body's key.
    pub fn kind(&self) -> &'static str {
        match self {
            PurgeRequest::Uri(_) => "uri",
            PurgeRequest::UriPrefix(_) => "uri_prefix",
            PurgeRequest::Upstream(_) => "upstream",
        }
    }
}

/// What a purge removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Entries removed from this replica's cache.
    pub local: u64,
    /// Values deleted from the shared tier (with `[cluster]`).
    pub shared: Option<u64>,
}

/// Why a purge was refused or is incomplete.
#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    /// Downstream (the operator's request): no upstream has this name.
    #[error("no upstream is named `{0}`")]
    UnknownUpstream(String),
    /// Downstream: the URI is in no upstream's namespace.
    #[error("`{0}` is in no upstream's namespace")]
    NoRoute(String),
    /// Downstream: an empty URI names nothing.
    #[error("`uri` is empty")]
    EmptyUri,
    /// Internal (the shared tier): this replica's cache was purged, the shared tier and the
    /// other replicas maybe not.
    #[error("purged {local} entries on this replica, but the shared tier failed (other replicas may still hold them)")]
    Shared {
        local: u64,
        #[source]
        source: ClusterError,
    },
}

impl Router {
    /// Purges what `request` names. Purging nothing is no error (`local` is 0).
    pub async fn purge(&self, request: &PurgeRequest) -> Result<Purged, PurgeError> {
        let routing = self.current();
        let targets = routing.purge_targets(request)?;
        let cache = &routing.0.cache;
        let local = targets.iter().map(|(slot, target)| cache.purge(*slot, target)).sum();
        let Some(cluster) = &routing.0.cluster else { return Ok(Purged { local, shared: None }) };
        let mut shared = 0;
        for (slot, target) in &targets {
            shared +=
                cluster.purge(*slot as usize, target).await.map_err(|source| PurgeError::Shared { local, source })?;
        }
        Ok(Purged { local, shared: Some(shared) })
    }
}

impl Routing {
    /// The upstream slots `request` names, each with what to remove there.
    fn purge_targets(&self, request: &PurgeRequest) -> Result<Vec<(u32, Target)>, PurgeError> {
        let upstreams = &self.0.upstreams;
        let ns = &self.0.ns;
        let slot = |i: usize| upstreams[i].slot();
        Ok(match request {
            PurgeRequest::Upstream(name) => {
                let u = upstreams.iter().find(|u| u.name() == name);
                vec![(u.ok_or_else(|| PurgeError::UnknownUpstream(name.clone()))?.slot(), Target::Everything)]
            }
            PurgeRequest::Uri(uri) if uri.is_empty() => return Err(PurgeError::EmptyUri),
            PurgeRequest::Uri(uri) => {
                let route = ns.route_uri(uri).map_err(|_| PurgeError::NoRoute(uri.clone()))?;
                let (candidates, upstream_uri) = route.candidates();
                candidates.iter().map(|&i| (slot(i), Target::Uri(upstream_uri.into()))).collect()
            }
            PurgeRequest::UriPrefix(prefix) => {
                // Passthrough URIs (`https://…`) look the same to clients as upstream-side, so
                // a prefix in such a scheme selects them on every upstream, prefixed or not.
                let passes = ns.rules().passes(prefix);
                (0..upstreams.len())
                    .filter_map(|i| {
                        let own = if passes { Some(prefix.as_str()) } else { upstream_prefix(ns.prefix(i), prefix) };
                        own.map(|p| (slot(i), Target::UriPrefix(p.into())))
                    })
                    .collect()
            }
        })
    }
}

/// The prefix, in an upstream's own URIs, that selects the same reads as `prefix` does in the
/// form clients see (`{namespace}+{uri}` when the upstream has a namespace); `None` when no
/// URI of that upstream can match.
fn upstream_prefix<'p>(namespace: Option<&str>, prefix: &'p str) -> Option<&'p str> {
    let Some(ns) = namespace else { return Some(prefix) };
    let mut lead = String::with_capacity(ns.len() + 1);
    lead.push_str(ns);
    lead.push(URI_SEP);
    if lead.starts_with(prefix) { Some("") } else { prefix.strip_prefix(lead.as_str()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_prefix_maps_onto_each_upstreams_own_uris() {
        assert_eq!(upstream_prefix(None, "file:///a"), Some("file:///a"));
        assert_eq!(upstream_prefix(Some("docs"), "docs+file:///a"), Some("file:///a"));
        assert_eq!(upstream_prefix(Some("docs"), "docs+"), Some(""), "every read of docs");
        assert_eq!(upstream_prefix(Some("docs"), "do"), Some(""));
        assert_eq!(upstream_prefix(Some("docs"), ""), Some(""));
        assert_eq!(upstream_prefix(Some("docs"), "git+x"), None);
        assert_eq!(upstream_prefix(Some("docs"), "docsx+a"), None);
        assert_eq!(upstream_prefix(Some("doc"), "docs+a"), None, "`doc` is not `docs`");
    }
}
