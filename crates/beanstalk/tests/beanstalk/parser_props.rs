//! Properties of the pure parser: no input makes it panic or over-consume,
//! and every valid command survives encode-then-parse unchanged, whole or
//! pipelined.

use bytes::BytesMut;
use delayd_beanstalk::proto::{parse, Command, Decoder, Frame, DEFAULT_MAX_JOB_SIZE, MAX_LINE};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,199}"
}

fn command() -> impl Strategy<Value = Command> {
    use Command as C;
    prop_oneof![
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(pri, delay, ttr, body)| C::Put {
                pri,
                delay,
                ttr,
                body
            }),
        name().prop_map(C::Use),
        Just(C::Reserve),
        any::<u32>().prop_map(C::ReserveWithTimeout),
        any::<u64>().prop_map(C::ReserveJob),
        any::<u64>().prop_map(C::Delete),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(id, pri, delay)| C::Release {
            id,
            pri,
            delay
        }),
        (any::<u64>(), any::<u32>()).prop_map(|(id, pri)| C::Bury { id, pri }),
        any::<u64>().prop_map(C::Touch),
        name().prop_map(C::Watch),
        name().prop_map(C::Ignore),
        any::<u64>().prop_map(C::Peek),
        Just(C::PeekReady),
        Just(C::PeekDelayed),
        Just(C::PeekBuried),
        any::<u32>().prop_map(C::Kick),
        any::<u64>().prop_map(C::KickJob),
        any::<u64>().prop_map(C::StatsJob),
        name().prop_map(C::StatsTube),
        Just(C::Stats),
        Just(C::ListTubes),
        Just(C::ListTubeUsed),
        Just(C::ListTubesWatched),
        (name(), any::<u32>()).prop_map(|(tube, delay)| C::PauseTube { tube, delay }),
        Just(C::Quit),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), max in 0usize..100) {
        match parse(&bytes, max) {
            Ok(Some((_, used))) => prop_assert!(used > 0 && used <= bytes.len()),
            Ok(None) => prop_assert!(bytes.len() < MAX_LINE + max + 2),
            Err(_) => {}
        }
        // The decoder eats any stream without panicking and always
        // makes progress on a complete line.
        let mut decoder = Decoder::new(max);
        let mut buf = BytesMut::from(&bytes[..]);
        let mut frames = 0;
        while decoder.decode(&mut buf).is_some() {
            frames += 1;
            prop_assert!(frames <= bytes.len() + 1, "decoder loops");
        }
    }

    #[test]
    fn valid_commands_round_trip(cmd in command()) {
        let wire = cmd.encode();
        prop_assert_eq!(parse(&wire, DEFAULT_MAX_JOB_SIZE), Ok(Some((cmd.clone(), wire.len()))));
        // Every strict prefix is incomplete, never an error.
        for cut in [0, wire.len() / 2, wire.len() - 1] {
            prop_assert_eq!(parse(&wire[..cut], DEFAULT_MAX_JOB_SIZE), Ok(None));
        }
    }

    #[test]
    fn pipelined_commands_decode_in_order(cmds in prop::collection::vec(command(), 1..10)) {
        let mut buf = BytesMut::new();
        for cmd in &cmds {
            buf.extend_from_slice(&cmd.encode());
        }
        let mut decoder = Decoder::new(DEFAULT_MAX_JOB_SIZE);
        for cmd in cmds {
            prop_assert_eq!(decoder.decode(&mut buf), Some(Frame::Command(cmd)));
        }
        prop_assert!(buf.is_empty());
    }
}
