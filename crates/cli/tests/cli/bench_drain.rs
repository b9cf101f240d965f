//! `delayd bench --due-together` against a real `delayd serve` (the embedded
//! store): the drain rate, and the server's lateness by stage, which only a
//! real broker records.

use crate::common::{delayd_cli, expect_json, Server};

#[test]
fn drain_bench_reports_its_rate_and_the_server_s_stages() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path());
    let args = [
        "bench",
        "--messages",
        "200",
        "--producers",
        "2",
        "--consumers",
        "2",
        "--due-together",
        "2s",
        "--batch",
        "50",
        "--json",
    ];
    let report = expect_json(&delayd_cli(&server.url(""), &args));
    assert_eq!(report["delivered"], 200, "{report}");
    assert_eq!(report["early"], 0, "{report}");
    assert!(
        report["drain_per_second"].as_f64().is_some_and(|r| r > 0.0),
        "{report}"
    );
    // Each message became ready (its timer), was leased, and was answered,
    // once: the server's histogram counts each stage 200 times.
    let stages = report["server_lateness"].as_array().expect("stages");
    let names: Vec<&str> = stages.iter().filter_map(|s| s["stage"].as_str()).collect();
    assert_eq!(names, ["ready", "leased", "answered"], "{report}");
    for stage in stages {
        assert_eq!(stage["count"], 200, "{report}");
        assert!(stage["p99_ms_at_most"].as_f64().is_some(), "{report}");
    }
}
