//! `delayd fsync-bench` on a temporary directory with a few writes: one JSON
//! line per layout (append, sparse, fallocate, prezeroed) with positive
//! rates and ordered percentiles, the table without `--json`, and no file
//! left behind.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fsync_bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_delayd"))
        .arg("fsync-bench")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the delayd binary")
}

#[test]
fn json_gives_one_line_per_layout_and_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("utf-8 path");
    let out = fsync_bench(&["--dir", path, "--writes", "20", "--block", "512", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let modes: Vec<&str> = lines.iter().filter_map(|l| l["mode"].as_str()).collect();
    assert_eq!(modes, ["append", "sparse", "fallocate", "prezeroed"]);
    for line in &lines {
        assert_eq!(line["writes"], 20, "{line}");
        assert_eq!(line["block"], 512, "{line}");
        assert!(line["fsyncs_per_s"].as_f64().expect("rate") > 0.0, "{line}");
        let (p50, p99, max) = (&line["p50_us"], &line["p99_us"], &line["max_us"]);
        let [p50, p99, max] = [p50, p99, max].map(|v| v.as_u64().expect("a latency"));
        assert!(p50 <= p99 && p99 <= max && max > 0, "{line}");
        assert!(
            line["cpu_us_per_fsync"].as_f64().expect("cpu") >= 0.0,
            "{line}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn text_is_a_table_and_bad_usage_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("utf-8 path");
    let out = fsync_bench(&["--dir", path, "--writes", "5"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains("fsyncs/s"), "{text}");
    for mode in ["append", "sparse", "fallocate", "prezeroed"] {
        assert!(text.lines().any(|l| l.starts_with(mode)), "{mode}: {text}");
    }

    let out = fsync_bench(&["--dir", path, "--writes", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let missing = dir.path().join("missing");
    let out = fsync_bench(&["--dir", missing.to_str().expect("utf-8"), "--writes", "5"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
