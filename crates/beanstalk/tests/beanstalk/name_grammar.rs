//! The queue-name grammar is written once, in core (`is_valid_queue_name`);
//! what remains of it elsewhere must agree with it on every string: the
//! `QueueName` constructor, this crate's tube-name check (which also lets
//! core's reserved names `.` and `..` parse, as beanstalkd does) and the
//! regular expression the OpenAPI document publishes. The same for the
//! message-id grammar and its pattern.
//!
//! The test lives here because this crate is the one that sees all the
//! copies (the server only passes the pattern through).

use delayd_beanstalk::proto::is_valid_name;
use delayd_core::{
    is_valid_message_id, is_valid_queue_name, MessageId, QueueName, MESSAGE_ID_PATTERN,
    QUEUE_NAME_MAX_LEN, QUEUE_NAME_PATTERN, RESERVED_QUEUE_NAMES,
};
use std::sync::LazyLock;

use proptest::prelude::*;
use regex::Regex;

/// Strings near the grammar's edges: its alphabet, characters just outside
/// it, `.`/`..` runs, a leading `-`, and lengths around the limit.
fn near_name() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[A-Za-z0-9._+/;$()-]{1,8}",
        2 => Just(".".to_owned()),
        2 => Just("..".to_owned()),
        1 => Just("-".to_owned()),
        1 => "[:{} %#?é\u{0}\n]",
        1 => "[A-Za-z0-9._+/;$()-]{190,210}",
    ];
    prop::collection::vec(piece, 0..4).prop_map(|pieces| pieces.concat())
}

fn queue_regex() -> &'static Regex {
    static REGEX: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(QUEUE_NAME_PATTERN).expect("core's queue-name pattern compiles")
    });
    &REGEX
}

fn id_regex() -> &'static Regex {
    static REGEX: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(MESSAGE_ID_PATTERN).expect("core's id pattern compiles"));
    &REGEX
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn every_copy_of_the_queue_name_grammar_agrees(name in near_name()) {
        let core = is_valid_queue_name(&name);
        prop_assert_eq!(QueueName::new(name.clone()).is_ok(), core, "QueueName::new {:?}", name);
        prop_assert_eq!(queue_regex().is_match(&name), core, "pattern {:?}", name);
        let reserved = RESERVED_QUEUE_NAMES.contains(&name.as_str());
        prop_assert_eq!(is_valid_name(name.as_bytes()), core || reserved, "beanstalk {:?}", name);
    }

    #[test]
    fn every_copy_of_the_message_id_grammar_agrees(id in "[A-Za-z0-9._:;/ é-]{0,260}") {
        let core = is_valid_message_id(&id);
        prop_assert_eq!(MessageId::new(id.clone()).is_ok(), core, "MessageId::new {:?}", id);
        prop_assert_eq!(id_regex().is_match(&id), core, "pattern {:?}", id);
    }

    #[test]
    fn every_copy_of_the_schedule_id_grammar_agrees(id in "[A-Za-z0-9._:;/ é-]{0,135}") {
        static PATTERN: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(delayd_core::recurring::SCHEDULE_ID_PATTERN).expect("core's schedule id pattern compiles")
        });
        let core = delayd_core::ScheduleId::new(id.clone()).is_ok();
        prop_assert_eq!(PATTERN.is_match(&id), core, "pattern {:?}", id);
    }
}

/// The edges the generator may miss, spelled out (and a check that the
/// generator's verdicts are not all one way).
#[test]
fn the_edges_of_the_queue_name_grammar() {
    let accepted = ["a", "...", ".a", ".-", "..a", "a-", "a+b/c;d$e(f)g_h.i-j"];
    let refused = ["", ".", "..", "-a", "a:b", "a b", "a{b}", "é"];
    let regex = queue_regex();
    for name in accepted {
        assert!(
            is_valid_queue_name(name) && regex.is_match(name),
            "{name:?}"
        );
    }
    for name in refused {
        assert!(
            !is_valid_queue_name(name) && !regex.is_match(name),
            "{name:?}"
        );
    }
    let longest = "a".repeat(QUEUE_NAME_MAX_LEN);
    assert!(regex.is_match(&longest) && is_valid_queue_name(&longest));
    let dotted = format!("..{}", "a".repeat(QUEUE_NAME_MAX_LEN - 2));
    assert!(regex.is_match(&dotted) && is_valid_queue_name(&dotted));
    let too_long = format!("{longest}a");
    assert!(!regex.is_match(&too_long) && !is_valid_queue_name(&too_long));
    assert!(
        is_valid_name(b".") && is_valid_name(b".."),
        "beanstalkd allows them"
    );
    assert!(!is_valid_name(b"\xff"));
}
