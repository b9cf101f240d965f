//! Fuzzes the beanstalkd parser and decoder: no input may panic, parse may
//! never claim more bytes than it was given, and whatever parses must
//! survive encode-then-parse unchanged.
#![no_main]

use bytes::BytesMut;
use delayd_beanstalk::proto::{parse, Decoder, DEFAULT_MAX_JOB_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((command, used))) = parse(data, DEFAULT_MAX_JOB_SIZE) {
        assert!(used > 0 && used <= data.len());
        let wire = command.encode();
        assert_eq!(
            parse(&wire, DEFAULT_MAX_JOB_SIZE),
            Ok(Some((command, wire.len())))
        );
    }
    // A small max job size exercises the JOB_TOO_BIG discard path.
    let mut decoder = Decoder::new(16);
    let mut buf = BytesMut::from(data);
    let mut frames = 0usize;
    while decoder.decode(&mut buf).is_some() {
        frames += 1;
        assert!(frames <= data.len() + 1, "decoder made no progress");
    }
});
