//! Records the commit the binary is built from, for `delayd --version`.
//!
//! `DELAYD_GIT_COMMIT` in the build environment wins (packagers building
//! from a tarball set it); else `git rev-parse --short HEAD` when the
//! source is a git checkout and git is installed; else `unknown`. Nothing
//! here can fail the build.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DELAYD_GIT_COMMIT");
    let commit = std::env::var("DELAYD_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=DELAYD_GIT_COMMIT={}", commit.trim());
    watch_head();
}

/// Rebuilds (this crate only) when HEAD moves: a commit, a checkout or a
/// fetch that updates packed refs.
fn watch_head() {
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let (git_dir, common) = (PathBuf::from(git_dir), PathBuf::from(common));
    let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(branch));
    }
    for path in watched {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The trimmed output of a successful `git` command run in this crate's
/// directory, or `None` (no git, not a checkout, any failure).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}
