//! The crate graph is the architecture (DESIGN §1): each crate may depend only on the crates
//! below it, and the lower crates stay free of what they must not know. Checked on the
//! resolved graph that `cargo metadata` reports, normal dependencies only (tests and build
//! scripts may use anything).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Each workspace crate and the workspace crates it may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    ("resmux-proto", &[]),
    ("resmux-http", &[]),
    ("resmux-cache", &["resmux-proto"]),
    ("resmux-cluster", &["resmux-proto", "resmux-cache"]),
    ("resmux-sample", &["resmux-proto", "resmux-http"]),
    ("resmux", &["resmux-proto", "resmux-http", "resmux-cache", "resmux-cluster", "resmux-sample"]),
    ("resmux-load", &["resmux", "resmux-proto", "resmux-http", "resmux-cache", "resmux-cluster", "resmux-sample"]),
];

/// Crates a workspace crate must not pull in, directly or through anything it depends on.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("resmux-proto", &["tokio", "hyper", "moka", "redis", "rustls"]),
    ("resmux-cache", &["hyper", "redis", "rustls", "resmux-http"]),
    ("resmux-http", &["resmux-proto", "serde_json", "moka", "redis"]),
];

/// Package name → the names of its normal (non-dev, non-build) dependencies.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("id"), p["name"].as_str().expect("name")))
        .collect();
    let mut graph = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().expect("resolve.nodes") {
        let name = name_of[node["id"].as_str().expect("id")];
        let deps = node["deps"]
            .as_array()
            .expect("deps")
            .iter()
            .filter(|d| d["dep_kinds"].as_array().is_some_and(|k| k.iter().any(|k| k["kind"].is_null())))
            .map(|d| name_of[d["pkg"].as_str().expect("pkg")].to_owned())
            .collect();
        graph.entry(name.to_owned()).or_insert_with(BTreeSet::new).extend::<BTreeSet<String>>(deps);
    }
    graph
}

/// Everything `root` depends on, transitively.
fn closure(graph: &BTreeMap<String, BTreeSet<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(next) = todo.pop() {
        for dep in graph.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn workspace_crates_depend_only_downward() {
    let graph = graph();
    let ours: BTreeSet<&str> = ALLOWED.iter().map(|(name, _)| *name).collect();
    for (name, allowed) in ALLOWED {
        let Some(deps) = graph.get(*name) else { continue };
        for dep in deps.iter().filter(|d| ours.contains(d.as_str())) {
            assert!(allowed.contains(&dep.as_str()), "{name} depends on {dep}, which is not below it");
        }
    }
    for crate_name in graph.keys().filter(|n| n.starts_with("resmux")) {
        assert!(ours.contains(crate_name.as_str()), "{crate_name} is not placed in the layering above");
    }
}

#[test]
fn lower_crates_stay_free_of_what_they_must_not_know() {
    let graph = graph();
    for (name, forbidden) in FORBIDDEN {
        if !graph.contains_key(*name) {
            continue;
        }
        let all = closure(&graph, name);
        for bad in *forbidden {
            assert!(!all.contains(*bad), "{name} pulls in {bad}");
        }
    }
}

#[test]
fn every_layer_is_a_crate() {
    let graph = graph();
    for name in ["resmux-proto", "resmux-http", "resmux-cache", "resmux-cluster", "resmux-sample"] {
        assert!(graph.contains_key(name), "{name} is a workspace crate");
    }
}
