use std::cell::Cell;

use super::*;
use crate::access::ScopeVerb;

thread_local! {
    static COMPARISONS: Cell<usize> = const { Cell::new(0) };
}

/// Called by `select_constant_time` once per `ct_eq` it makes.
pub(super) fn count_comparison() {
    COMPARISONS.with(|c| c.set(c.get() + 1));
}

fn comparisons_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    COMPARISONS.with(|c| c.set(0));
    let result = f();
    (result, COMPARISONS.with(Cell::get))
}

fn hex_digest(secret: &str) -> String {
    hex::encode(token_digest(secret.as_bytes()))
}

fn file(tokens: &[(&str, &str, &[&str])]) -> String {
    tokens
        .iter()
        .map(|(name, secret, scopes)| {
            let scopes: Vec<String> = scopes.iter().map(|s| format!("{s:?}")).collect();
            format!(
                "[[token]]\nname = {name:?}\nsha256 = {:?}\nscopes = [{}]\n\n",
                hex_digest(secret),
                scopes.join(", ")
            )
        })
        .collect()
}

#[test]
fn a_token_file_gives_each_secret_its_name_and_scopes() {
    let text = file(&[
        ("producer", "s3cret-1", &["publish:orders-*"]),
        ("viewer", "s3cret-2", &["read:*", "manage:orders"]),
    ]);
    let parsed = TokenFile::parse(&text).expect("a valid file");
    assert_eq!(parsed.names(), ["producer", "viewer"]);
    let viewer = parsed
        .lookup(&token_digest(b"s3cret-2"))
        .expect("the viewer's secret is known");
    assert_eq!(viewer.name.as_deref(), Some("viewer"));
    assert!(viewer.grant.allows(ScopeVerb::Read, "anything"));
    assert!(viewer.grant.allows(ScopeVerb::Manage, "orders"));
    assert!(!viewer.grant.allows(ScopeVerb::Manage, "orders-eu"));
    assert!(parsed.lookup(&token_digest(b"s3cret-3")).is_none());
    // The secret itself is not a token: only what hashes to a digest is.
    assert!(parsed
        .lookup(&token_digest(hex_digest("s3cret-2").as_bytes()))
        .is_none());
}

#[test]
fn an_empty_file_accepts_no_token() {
    let parsed = TokenFile::parse("# no tokens yet\n").expect("valid");
    assert!(parsed.names().is_empty());
    assert!(parsed.lookup(&token_digest(b"")).is_none());
}

/// Each refusal names the line of the culprit.
#[test]
fn a_bad_file_is_refused_naming_the_line() {
    let good = hex_digest("x");
    let cases: Vec<(String, usize, &str)> = vec![
        ("[[token]\nname = 1\n".into(), 1, ""),
        (
            format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nscopes = [\n  \"read:*\",\n  \"delete:orders\",\n]\n"),
            6,
            "unknown verb \"delete\"",
        ),
        (
            format!("[[token]]\nname = \"a\"\nsha256 = \"{}\"\nscopes = [\"read:*\"]\n", good.to_uppercase()),
            3,
            "64 lowercase hex",
        ),
        (
            format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nscope = [\"read:*\"]\n"),
            4,
            "unknown field",
        ),
        (
            format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nscopes = []\n"),
            4,
            "no scopes",
        ),
        (
            format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nscopes = [\"read\"]\n"),
            4,
            "not VERB:QUEUE_GLOB",
        ),
        (
            format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nscopes = [\"read:orders?\"]\n"),
            4,
            "not a queue glob",
        ),
        (
            format!(
                "{}[[token]]\nname = \"a\"\nsha256 = \"{}\"\nscopes = [\"read:*\"]\n",
                file(&[("a", "one", &["read:*"])]),
                hex_digest("two")
            ),
            7,
            "given twice",
        ),
        (
            format!(
                "{}[[token]]\nname = \"b\"\nsha256 = \"{}\"\nscopes = [\"read:*\"]\n",
                file(&[("a", "one", &["read:*"])]),
                hex_digest("one")
            ),
            8,
            "same sha256",
        ),
    ];
    for (text, line, words) in cases {
        let error = TokenFile::parse(&text).expect_err(&text);
        assert_eq!(error.line, line, "{error} in\n{text}");
        assert!(error.reason.contains(words), "{error:?} lacks {words:?}");
        assert!(error.to_string().starts_with(&format!("line {line}: ")));
    }
}

/// The comparison is `select_constant_time`'s `ct_eq`, made against every
/// entry of a bucket wherever the match is (first, last, none): no early
/// exit.
#[test]
fn every_entry_is_compared_in_constant_time_without_an_early_exit() {
    let digests: Vec<(Sha256Digest, usize)> = (0..5)
        .map(|i| {
            // One bucket: equal first 8 bytes, different tails.
            let mut digest = [7; 32];
            digest[31] = i as u8;
            (digest, i)
        })
        .collect();
    for target in [0usize, 2, 4] {
        let (found, compared) =
            comparisons_during(|| select_constant_time(&digests, &digests[target].0).copied());
        assert_eq!(found, Some(target));
        assert_eq!(compared, digests.len(), "match at {target}");
    }
    let mut absent = [7; 32];
    absent[31] = 99;
    let (found, compared) = comparisons_during(|| select_constant_time(&digests, &absent));
    assert_eq!(found, None);
    assert_eq!(compared, digests.len());
}

/// A request's token goes through that comparison: a lookup in a file makes
/// at least one `ct_eq` for a known token and for a token in the same
/// bucket, none for a digest whose bucket is empty.
#[test]
fn a_token_lookup_goes_through_the_constant_time_comparison() {
    let text = file(&[("a", "one", &["read:*"]), ("b", "two", &["read:*"])]);
    let parsed = TokenFile::parse(&text).expect("valid");
    let (found, compared) = comparisons_during(|| parsed.lookup(&token_digest(b"two")));
    assert_eq!(found.and_then(|p| p.name.clone()).as_deref(), Some("b"));
    assert_eq!(compared, 1);
    let full = FullTokens::new(&["admin-secret".into()]);
    let (found, compared) = comparisons_during(|| full.lookup(&token_digest(b"admin-secret")));
    assert_eq!(found.map(|p| p.grant.clone()), Some(Grant::Full));
    assert_eq!(compared, 1);
}

#[test]
fn a_replaced_set_takes_effect_at_the_next_lookup() {
    let before = TokenFile::parse(&file(&[("old", "old-secret", &["read:*"])])).expect("valid");
    let handle = ScopedTokens::new(before);
    let reader = handle.clone();
    assert!(reader.lookup(&token_digest(b"old-secret")).is_some());
    let after = TokenFile::parse(&file(&[("new", "new-secret", &["read:*"])])).expect("valid");
    handle.replace(after);
    assert!(reader.lookup(&token_digest(b"old-secret")).is_none());
    assert!(reader.lookup(&token_digest(b"new-secret")).is_some());
    assert_eq!(reader.names(), ["new"]);
}
