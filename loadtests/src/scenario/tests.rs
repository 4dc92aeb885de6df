use super::*;

#[test]
fn every_scenario_file_parses() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(scenario_dir()).expect("scenario dir") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.figure.is_empty());
        names.push(s.name);
    }
    names.sort();
    for wanted in ["ceiling", "cold-stampede", "direct", "fanout-10k", "hot-read", "merge-16", "mixed"] {
        assert!(names.iter().any(|n| n == wanted), "missing {wanted}.toml");
    }
}

#[test]
fn defaults_fill_what_a_file_leaves_out() {
    let s = Scenario::parse("t", "figure = \"x\"\nclients = 2\n[mix]\nlist = 1\n").unwrap();
    assert_eq!(s.name, "t");
    assert_eq!(s.sides, vec![Side::Proxy]);
    assert_eq!(s.duration.0, Duration::from_secs(10));
    assert_eq!(s.principals, Principals::Distinct);
    // A [mix] table replaces the default: weights it leaves out are zero.
    assert_eq!(s.mix, Mix { list: 1, ..Mix::default() });
    assert_eq!(s.keys(), 100);
}

#[test]
fn shapes_parse_with_their_types() {
    let s = Scenario::parse(
        "t",
        r#"
figure = "f"
sides = ["proxy", "direct", "ceiling"]
duration = "1m 30s"
warmup = "500ms"
clients = 8
requests = 1000
listeners = 3
update_hz = 2.5
principals = "anonymous"
[proxy_config.cache]
enabled = false
[upstream_config]
max_in_flight = 256
"#,
    )
    .unwrap();
    assert_eq!(s.principals, Principals::Anonymous);
    assert_eq!(s.sides, vec![Side::Proxy, Side::Direct, Side::Ceiling]);
    assert_eq!(s.duration.0, Duration::from_secs(90));
    assert_eq!(s.warmup.0, Duration::from_millis(500));
    assert_eq!(s.requests, Some(1000));
    assert_eq!(s.upstream_config["max_in_flight"].as_integer(), Some(256));
    assert!(s.proxy_config["cache"].is_table());
}

#[test]
fn every_problem_is_reported_at_once() {
    let errors =
        Scenario::parse("t", "figure = \"\"\nsides = [\"proxy\", \"proxy\"]\nduration = \"11m\"\nupstreams = 0\n")
            .unwrap_err();
    assert_eq!(errors.len(), 5, "{errors:?}");
    let unknown = Scenario::parse("t", "figure = \"x\"\nclients = 1\nbogus = 1\n").unwrap_err();
    assert!(unknown[0].contains("bogus"), "{unknown:?}");
    let bad_duration = Scenario::parse("t", "figure = \"x\"\nclients = 1\nduration = \"soon\"\n").unwrap_err();
    assert!(bad_duration[0].contains("soon"), "{bad_duration:?}");
    let bad_side = Scenario::parse("t", "figure = \"x\"\nclients = 1\nsides = [\"both\"]\n").unwrap_err();
    assert!(bad_side[0].contains("both"), "{bad_side:?}");
}
