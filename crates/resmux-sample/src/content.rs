//! What a sample server holds.

use std::time::Duration;

/// Which content set to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Product documentation pages (the demo's HTTP upstream).
    Docs,
    /// Team notes (the demo's stdio upstream).
    Notes,
    /// `count` generated resources of `size` bytes each (tests, load).
    Generated { count: usize, size: usize },
}

/// Everything that shapes a sample server.
#[derive(Debug, Clone)]
pub struct SampleSpec {
    /// Server name in `serverInfo`.
    pub name: String,
    pub profile: Profile,
    /// URI scheme of its resources (`docs` gives `docs://…`).
    pub scheme: String,
    /// Items per list page.
    pub page_size: usize,
    /// `ttlMs` on its results.
    pub ttl_ms: u64,
    /// `cacheScope` of its results: public, or private.
    pub public: bool,
    /// Delay before answering each request (simulates a slow backend).
    pub delay: Duration,
    /// When set, the `…://status` resource changes at this period and listeners subscribed to
    /// it get `notifications/resources/updated`.
    pub tick: Option<Duration>,
    /// Whether the `crash` tool exists (it ends the process; stdio tests use it).
    pub crashable: bool,
    /// Speak the legacy 2025-11-25 revision over HTTP instead: `initialize`, sessions,
    /// `resources/subscribe`, a GET stream, no `resultType`/`ttlMs`/`cacheScope`.
    pub legacy: bool,
    /// Also serve what interop tests need: a resource with a non-ASCII URI (`…://café/menü`),
    /// a `lookup` tool whose `region` and `limit` arguments carry `x-mcp-header` annotations
    /// (and which rejects ill-typed arguments with -32602), an `approve` tool that answers
    /// `input_required` until retried with an accepted answer, and a `sample_me` tool that
    /// needs the client's `sampling` capability (-32021 with HTTP 400 otherwise).
    pub interop: bool,
    /// Whether `…://me` (whose content names the caller) is called `public`, as an upstream
    /// that stamps every result public by default does: the case a shared cache must not
    /// believe when the upstream can tell callers apart.
    pub me_public: bool,
    /// Resources the client could fetch from the web itself (`https://…`, as the spec means
    /// such URIs), listed and read like the others, linked by the `link` tool, with a
    /// template `{first}/{page}` for completion; tests of passthrough URIs use them.
    pub web: Vec<String>,
}

impl SampleSpec {
    /// A spec with test-friendly defaults: 25 generated 256-byte resources, pages of 10, public,
    /// 60 s TTL, no delay, no ticking.
    pub fn generated(name: &str, count: usize) -> Self {
        Self {
            name: name.to_owned(),
            profile: Profile::Generated { count, size: 256 },
            scheme: name.to_owned(),
            page_size: 10,
            ttl_ms: 60_000,
            public: true,
            delay: Duration::ZERO,
            tick: None,
            crashable: false,
            legacy: false,
            interop: false,
            me_public: false,
            web: Vec::new(),
        }
    }

    /// The demo's documentation server.
    pub fn docs() -> Self {
        Self {
            profile: Profile::Docs,
            scheme: "docs".into(),
            page_size: 4,
            ttl_ms: 300_000,
            public: true,
            tick: Some(Duration::from_secs(5)),
            ..Self::generated("docs", 0)
        }
    }

    /// The demo's notes server.
    pub fn notes() -> Self {
        Self {
            profile: Profile::Notes,
            scheme: "notes".into(),
            page_size: 10,
            ttl_ms: 30_000,
            public: false,
            tick: None,
            ..Self::generated("notes", 0)
        }
    }
}

/// One static resource.
#[derive(Debug, Clone)]
pub struct Doc {
    pub path: String,
    pub title: String,
    pub mime: &'static str,
    pub text: String,
}

const DOCS: &[(&str, &str, &str)] = &[
    (
        "getting-started",
        "Getting started",
        "# Getting started\n\nInstall the CLI with `cargo install acme`, then run `acme init` in an empty directory. The wizard asks for a project name and a region, writes `acme.toml`, and prints the next steps.\n\n## Requirements\n\n- Linux or macOS\n- 2 GiB of free memory\n- Network access to your package registry\n",
    ),
    (
        "configuration",
        "Configuration reference",
        "# Configuration\n\n`acme.toml` holds every setting. Unknown keys are an error.\n\n| key | default | meaning |\n|---|---|---|\n| `region` | `eu-west` | where jobs run |\n| `workers` | `4` | parallel workers |\n| `retry.max` | `3` | attempts per job |\n",
    ),
    (
        "architecture",
        "Architecture overview",
        "# Architecture\n\nRequests enter through the gateway, which authenticates them and places jobs on the queue. Workers pull jobs, run them in a sandbox, and write results to object storage. The scheduler scales workers on queue depth.\n",
    ),
    (
        "runbook-oncall",
        "On-call runbook",
        "# On-call runbook\n\n1. Check the queue depth dashboard.\n2. If depth grows for more than 10 minutes, scale workers: `acme scale --workers +4`.\n3. If jobs fail with `E_SANDBOX`, drain the node and page the platform team.\n",
    ),
    (
        "changelog",
        "Changelog",
        "# Changelog\n\n## 2.3.0\n- Jobs can declare a timeout.\n- `acme logs --follow` streams logs.\n\n## 2.2.1\n- Fixed a leak in the worker pool.\n",
    ),
    (
        "api/jobs",
        "Jobs API",
        "# Jobs API\n\n`POST /v1/jobs` submits a job: `{\"image\": \"…\", \"args\": [\"…\"]}`. `GET /v1/jobs/{id}` returns its status: `queued`, `running`, `done` or `failed`.\n",
    ),
    (
        "api/auth",
        "Authentication",
        "# Authentication\n\nEvery API call carries `Authorization: Bearer <token>`. Tokens are minted with `acme token create --scope jobs:write` and expire after 30 days.\n",
    ),
    (
        "faq",
        "FAQ",
        "# FAQ\n\n**Can I run jobs on GPUs?** Yes, set `resources.gpu = 1`.\n\n**Where are logs kept?** For 14 days in object storage.\n",
    ),
    (
        "security",
        "Security model",
        "# Security model\n\nJobs run in gVisor sandboxes with no network by default. Secrets are mounted read-only and never logged.\n",
    ),
    (
        "limits",
        "Quotas and limits",
        "# Limits\n\n- 1,000 queued jobs per project\n- 24 h maximum job duration\n- 10 GiB of output per job\n",
    ),
];

const NOTES: &[(&str, &str, &str)] = &[
    (
        "2026-11-02-standup",
        "Stand-up, 2 Nov",
        "- Ana: finishing the queue metrics.\n- Ben: on-call, two pages overnight (disk pressure on worker-7).\n- Chen: reviewing the retry-policy RFC.\n",
    ),
    (
        "2026-11-09-retro",
        "Retro, 9 Nov",
        "Went well: release 2.3 shipped on time.\nTo improve: flaky integration tests; alert noise.\nActions: quarantine flaky tests (Ben), tune disk alerts (Ana).\n",
    ),
    (
        "rfc-retry-policy",
        "RFC: retry policy",
        "Proposal: exponential backoff with full jitter, base 200 ms, cap 30 s, at most 3 attempts, no retry on 4xx.\nOpen question: should timeouts count as attempts?\n",
    ),
    (
        "incident-2026-10-28",
        "Incident 28 Oct",
        "Impact: 14 minutes of failed job submissions.\nCause: expired TLS certificate on the gateway.\nFollow-up: certificate expiry alert at 14 days.\n",
    ),
    (
        "hiring-plan",
        "Hiring plan",
        "Two backend engineers in Q1, one SRE in Q2. Interview loop: systems design, coding, on-call scenario.\n",
    ),
    ("ideas", "Ideas backlog", "- Job templates\n- Per-team cost reports\n- Preemptible workers for batch jobs\n"),
];

impl SampleSpec {
    /// The static resources.
    pub fn docs_list(&self) -> Vec<Doc> {
        let mut docs = self.base_docs();
        if self.interop {
            docs.push(Doc {
                path: NON_ASCII_PATH.to_owned(),
                title: "Menü".to_owned(),
                mime: "text/plain",
                text: "Café au lait, crème brûlée".to_owned(),
            });
        }
        docs
    }

    fn base_docs(&self) -> Vec<Doc> {
        let table = match self.profile {
            Profile::Docs => DOCS,
            Profile::Notes => NOTES,
            Profile::Generated { count, size } => {
                return (0..count)
                    .map(|i| Doc {
                        path: format!("item/{i}"),
                        title: format!("Item {i}"),
                        mime: "text/plain",
                        text: filler(i, size),
                    })
                    .collect();
            }
        };
        table
            .iter()
            .map(|(path, title, text)| Doc {
                path: (*path).to_owned(),
                title: (*title).to_owned(),
                mime: "text/markdown",
                text: (*text).to_owned(),
            })
            .collect()
    }

    /// The URI of a resource path.
    pub fn uri(&self, path: &str) -> String {
        format!("{}://{path}", self.scheme)
    }
}

/// The path of the interop resource whose URI is not ASCII.
pub const NON_ASCII_PATH: &str = "café/menü";

/// `size` bytes of deterministic text for item `i`.
fn filler(i: usize, size: usize) -> String {
    let mut s = format!("item {i}: ");
    let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"];
    let mut k = i;
    while s.len() < size {
        s.push_str(words[k % words.len()]);
        s.push(' ');
        k = k.wrapping_mul(31).wrapping_add(7);
    }
    s.truncate(size);
    s
}
