//! What one side of a scenario runs against, started fresh for each side so that upstream
//! counters start at zero and caches start cold: the sample upstreams (in this process, so
//! their request counters can be read), plus the proxy for the `proxy` side, or the bare
//! server for the `ceiling` side. [`Addressing`] says where each request goes and how it
//! names its resource or tool on that side.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rand::{Rng, RngExt};
use resmux::mcp::method as m;
use resmux::sample::{Profile, Sample, SampleHttp, SampleSpec};

use crate::ceiling::{Ceiling, CeilingProcess};
use crate::conn::Conn;
use crate::placement::Placement;
use crate::proxy::Proxy;
use crate::scenario::{Scenario, Side};
use crate::servers::on_servers;
use crate::wire::{Op, Outcome};
use crate::zipf::Zipf;

/// Methods whose upstream counts are reported.
pub const COUNTED_METHODS: &[&str] = &[
    m::RESOURCES_READ,
    m::RESOURCES_LIST,
    m::TOOLS_CALL,
    m::DISCOVER,
    m::LISTEN,
    m::TOOLS_LIST,
    m::PROMPTS_LIST,
    m::RESOURCES_TEMPLATES_LIST,
];

/// The kinds of request a client draws from its mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    List,
    Call,
    Discover,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Read, Kind::List, Kind::Call, Kind::Discover];

    pub fn method(self) -> &'static str {
        match self {
            Kind::Read => m::RESOURCES_READ,
            Kind::List => m::RESOURCES_LIST,
            Kind::Call => m::TOOLS_CALL,
            Kind::Discover => m::DISCOVER,
        }
    }
}

/// Where requests go and how they name things on one side. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Addressing {
    /// Connection endpoints: the proxy, each upstream (direct), or the ceiling.
    pub endpoints: Vec<SocketAddr>,
    /// Whether the endpoints are the upstreams themselves (one per upstream).
    per_upstream: bool,
    /// Whether URIs and tool names carry the upstream prefix (a proxy with several upstreams).
    prefixed: bool,
    upstreams: usize,
    /// Whether listeners spread over the endpoints round-robin (replicas of one proxy).
    round_robin: bool,
}

/// Name of upstream `i` (also its URI scheme).
pub fn upstream_name(i: usize) -> String {
    format!("up{i}")
}

impl Addressing {
    /// Several replicas of one proxy in front of one upstream: listener `i` goes to replica
    /// `i % replicas.len()` (a round-robin front).
    pub fn replicas(replicas: Vec<SocketAddr>) -> Self {
        Self { endpoints: replicas, per_upstream: false, prefixed: false, upstreams: 1, round_robin: true }
    }

    fn endpoint_of(&self, upstream: usize) -> usize {
        if self.per_upstream { upstream } else { 0 }
    }

    fn uri(&self, upstream: usize, path: &str) -> String {
        let name = upstream_name(upstream);
        if self.prefixed { format!("{name}+{name}://{path}") } else { format!("{name}://{path}") }
    }

    /// A read of global key `key`: keys are spread over upstreams round-robin, so the hottest
    /// keys land on different upstreams.
    pub fn read(&self, key: usize) -> (usize, Op) {
        let upstream = key % self.upstreams;
        let item = key / self.upstreams;
        let uri = self.uri(upstream, &format!("item/{item}"));
        (self.endpoint_of(upstream), Op::Read { uri })
    }

    /// The request of `kind` for client `client`.
    pub fn op<R: Rng + ?Sized>(&self, kind: Kind, client: usize, rng: &mut R, zipf: &Zipf) -> (usize, Op) {
        // Without a proxy there is no merged list or discover: each client asks "its" upstream.
        let own = client % self.upstreams;
        match kind {
            Kind::Read => self.read(zipf.sample(rng)),
            Kind::List => (self.endpoint_of(own), Op::List),
            Kind::Discover => (self.endpoint_of(own), Op::Discover),
            Kind::Call => {
                let upstream = rng.random_range(0..self.upstreams);
                let tool = if self.prefixed { format!("{}__add", upstream_name(upstream)) } else { "add".to_owned() };
                let (a, b) = (rng.random_range(0..1000), rng.random_range(0..1000));
                (self.endpoint_of(upstream), Op::Call { tool, a, b })
            }
        }
    }

    /// The listen on the first upstream's changing `status` resource.
    pub fn listen(&self) -> (usize, Op) {
        self.listen_for(0)
    }

    /// The listen of listener `i`: on the one endpoint, or spread round-robin over replicas.
    pub fn listen_for(&self, i: usize) -> (usize, Op) {
        let ep = if self.round_robin { i % self.endpoints.len() } else { self.endpoint_of(0) };
        (ep, Op::Listen { uri: self.uri(0, "status") })
    }
}

/// A started side.
pub struct Target {
    pub side: Side,
    pub addressing: Arc<Addressing>,
    /// The sample upstreams' state (counters, `bump()`); empty for the ceiling.
    pub samples: Vec<Sample>,
    servers: Vec<SampleHttp>,
    pub proxy: Option<Proxy>,
    ceiling: Option<CeilingServer>,
}

/// The ceiling server, wherever it runs.
enum CeilingServer {
    InProcess(Ceiling),
    Child(Box<CeilingProcess>),
}

/// The sample spec of upstream `i` in scenario `s`.
pub fn sample_spec(s: &Scenario, i: usize) -> SampleSpec {
    let mut spec = SampleSpec::generated(&upstream_name(i), s.resources);
    spec.profile = Profile::Generated { count: s.resources, size: s.resource_bytes };
    spec.page_size = s.page_size;
    spec.ttl_ms = s.ttl_ms;
    spec.public = s.public;
    spec.delay = Duration::from_millis(s.upstream_delay_ms);
    // Changes come from the load generator's own bumps, at the scenario's rate.
    spec.tick = None;
    spec
}

/// Starts a sample upstream on the server runtime.
async fn start_sample(spec: SampleSpec) -> Result<SampleHttp> {
    on_servers(SampleHttp::start(Sample::new(spec), ([127, 0, 0, 1], 0).into()))
        .await
        .context("starting a sample upstream")
}

async fn start_samples(s: &Scenario) -> Result<Vec<SampleHttp>> {
    let mut servers = Vec::with_capacity(s.upstreams);
    for i in 0..s.upstreams {
        servers.push(start_sample(sample_spec(s, i)).await?);
    }
    Ok(servers)
}

/// The bytes of a real `resources/read` answer for key 0 (the ceiling serves them).
pub(crate) async fn read_answer_bytes(s: &Scenario) -> Result<bytes::Bytes> {
    let server = start_sample(sample_spec(s, 0)).await?;
    let addressing = Addressing {
        endpoints: vec![server.addr],
        per_upstream: true,
        prefixed: false,
        upstreams: 1,
        round_robin: false,
    };
    let result = async {
        let mut conn = Conn::open(server.addr, Duration::from_secs(5), None).await?;
        let (_, op) = addressing.read(0);
        let (parts, body) = conn.fetch(&op).await?;
        if crate::wire::classify(parts.status, false, &body) != Outcome::Ok {
            bail!("the sample upstream did not answer a read");
        }
        Ok(body)
    }
    .await;
    server.stop();
    result
}

impl Target {
    /// Starts everything `side` needs.
    pub async fn start(s: &Scenario, side: Side, placement: &Placement) -> Result<Self> {
        match side {
            Side::Ceiling => {
                let body = read_answer_bytes(s).await?;
                let ceiling = match placement {
                    Placement::Processes { ceiling, .. } => {
                        CeilingServer::Child(Box::new(CeilingProcess::spawn(ceiling, &body).await?))
                    }
                    Placement::InProcess => CeilingServer::InProcess(on_servers(Ceiling::start(body)).await?),
                };
                let addr = match &ceiling {
                    CeilingServer::Child(c) => c.addr,
                    CeilingServer::InProcess(c) => c.addr,
                };
                Ok(Self {
                    side,
                    addressing: Arc::new(Addressing {
                        endpoints: vec![addr],
                        per_upstream: false,
                        prefixed: false,
                        upstreams: s.upstreams,
                        round_robin: false,
                    }),
                    samples: Vec::new(),
                    servers: Vec::new(),
                    proxy: None,
                    ceiling: Some(ceiling),
                })
            }
            Side::Direct => {
                let servers = start_samples(s).await?;
                Ok(Self {
                    side,
                    addressing: Arc::new(Addressing {
                        endpoints: servers.iter().map(|u| u.addr).collect(),
                        per_upstream: true,
                        prefixed: false,
                        upstreams: s.upstreams,
                        round_robin: false,
                    }),
                    samples: servers.iter().map(|u| u.sample.clone()).collect(),
                    servers,
                    proxy: None,
                    ceiling: None,
                })
            }
            Side::Proxy => {
                let servers = start_samples(s).await?;
                let ups: Vec<(String, String)> =
                    servers.iter().enumerate().map(|(i, u)| (upstream_name(i), u.url())).collect();
                let proxy = match Proxy::start(placement, &ups, s).await {
                    Ok(p) => p,
                    Err(e) => {
                        for u in &servers {
                            u.stop();
                        }
                        return Err(e);
                    }
                };
                Ok(Self {
                    side,
                    addressing: Arc::new(Addressing {
                        endpoints: vec![proxy.addr],
                        per_upstream: false,
                        prefixed: s.upstreams > 1,
                        upstreams: s.upstreams,
                        round_robin: false,
                    }),
                    samples: servers.iter().map(|u| u.sample.clone()).collect(),
                    servers,
                    proxy: Some(proxy),
                    ceiling: None,
                })
            }
        }
    }

    /// Whether the server ends of this side's connections live in this process (they count
    /// against this process's open-file limit too).
    pub fn serves_in_process(&self) -> bool {
        match self.side {
            Side::Proxy => self.proxy.as_ref().is_some_and(|p| !p.is_child()),
            Side::Direct => true,
            Side::Ceiling => matches!(self.ceiling, Some(CeilingServer::InProcess(_))),
        }
    }

    /// Requests the upstreams have received, all methods.
    pub fn upstream_total(&self) -> u64 {
        self.samples.iter().map(Sample::total).sum()
    }

    /// Requests the upstreams have received, per counted method.
    pub fn upstream_by_method(&self) -> Vec<(&'static str, u64)> {
        COUNTED_METHODS.iter().map(|method| (*method, self.samples.iter().map(|s| s.count(method)).sum())).collect()
    }

    /// Stops the proxy, the upstreams and the ceiling.
    pub async fn stop(self) {
        if let Some(p) = self.proxy {
            p.stop().await;
        }
        for u in &self.servers {
            u.stop();
        }
        match self.ceiling {
            Some(CeilingServer::Child(c)) => c.stop().await,
            Some(CeilingServer::InProcess(c)) => drop(c),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn addressing(per_upstream: bool, prefixed: bool, upstreams: usize) -> Addressing {
        let endpoints = if per_upstream {
            (0..upstreams).map(|i| SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16))).collect()
        } else {
            vec![SocketAddr::from(([127, 0, 0, 1], 999))]
        };
        Addressing { endpoints, per_upstream, prefixed, upstreams, round_robin: false }
    }

    #[test]
    fn each_side_names_resources_its_own_way() {
        let proxy = addressing(false, true, 4);
        assert_eq!(proxy.read(5), (0, Op::Read { uri: "up1+up1://item/1".into() }));
        let direct = addressing(true, false, 4);
        assert_eq!(direct.read(5), (1, Op::Read { uri: "up1://item/1".into() }));
        let single = addressing(false, false, 1);
        assert_eq!(single.listen(), (0, Op::Listen { uri: "up0://status".into() }));
        let mut rng = SmallRng::seed_from_u64(1);
        let zipf = Zipf::new(4, 1.0);
        match proxy.op(Kind::Call, 0, &mut rng, &zipf) {
            (0, Op::Call { tool, .. }) => assert!(tool.starts_with("up") && tool.ends_with("__add")),
            other => panic!("{other:?}"),
        }
        assert_eq!(direct.op(Kind::List, 6, &mut rng, &zipf), (2, Op::List));
        let three = Addressing::replicas((0..3).map(|i| SocketAddr::from(([127, 0, 0, 1], 2000 + i))).collect());
        assert_eq!(three.listen_for(4), (1, Op::Listen { uri: "up0://status".into() }));
        assert_eq!(single.listen_for(4).0, 0);
    }
}
