//! The codec and the receiver over arbitrary input: no panic, nothing forged
//! or replayed accepted, reports round-trip.

use super::*;

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_are_never_accepted(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut r = Receiver::new(key(), 1, policy());
        prop_assert!(r.accept(LOCAL, &data, NOW).is_err());
    }

    /// Valid headers with arbitrary bodies: still never a panic.
    #[test]
    fn arbitrary_bodies_behind_a_valid_header_never_panic(body in proptest::collection::vec(any::<u8>(), 0..1400)) {
        let mut data = one(5, 0, NOW)[..28].to_vec();
        data.extend_from_slice(&body);
        let mut r = Receiver::new(key(), 1, policy());
        prop_assert!(r.accept(LOCAL, &data, NOW).is_err());
        // Even correctly signed garbage only yields Malformed (or parses).
        let (k, len) = (key(), data.len().min(MAX_DATAGRAM - 32));
        data.truncate(len);
        let mac = k.sign(&data);
        data.extend_from_slice(&mac);
        let _ = r.accept(LOCAL, &data, NOW);
    }

    /// Any change to a valid datagram is refused.
    #[test]
    fn any_bit_flip_is_refused(at in 0usize..4000, bit in 0u8..8) {
        let good = one(5, 0, NOW);
        let mut bad = good.clone();
        let i = at % bad.len();
        bad[i] ^= 1 << bit;
        let mut r = Receiver::new(key(), 1, policy());
        prop_assert!(r.accept(LOCAL, &bad, NOW).is_err());
    }

    #[test]
    /// Whatever the sender's clock offset (within the window) and whatever
    /// other senders come and go, a datagram accepted once is never
    /// accepted again.
    #[test]
    fn an_accepted_datagram_is_never_accepted_twice(
        skew in -10_000i64..=10_000,
        steps in proptest::collection::vec((0u64..25_000, any::<bool>()), 1..24),
    ) {
        let mut r = Receiver::new(key(), 1, Policy { max_senders: 2, ..policy() });
        let sent = NOW.saturating_add_signed(skew);
        let captured = one(5, 0, sent);
        prop_assert!(r.accept(LOCAL, &captured, NOW).is_ok());
        let (mut now, mut other) = (NOW, 100u64);
        for (gap, newcomer) in steps {
            now += gap;
            if newcomer {
                other += 1;
                let _ = r.accept(LOCAL, &one(other, 0, now), now);
            }
            prop_assert!(r.accept(LOCAL, &captured, now).is_err(), "replayed at +{} ms", now - NOW);
            prop_assert!(r.senders() <= 2);
        }
    }

    #[test]
    fn arbitrary_reports_round_trip(
        report in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 1..=255), 1u32..=u32::MAX), 0..300),
        group in proptest::collection::vec(any::<u8>(), 1..=64),
    ) {
        let report: Vec<Entry> = report.into_iter().map(|(t, h)| (t.into_boxed_slice(), h)).collect();
        let mut seq = 0;
        let dgs = wire::encode(&key(), 9, &mut seq, NOW, &group, &report);
        let mut r = Receiver::new(key(), 1, policy());
        let mut got = Vec::new();
        for dg in &dgs {
            prop_assert!(dg.len() <= MAX_DATAGRAM);
            let d = r.accept(LOCAL, dg, NOW);
            prop_assert!(d.is_ok(), "{:?}", d);
            if let Ok(d) = d {
                prop_assert_eq!(&*d.group, &group[..]);
                got.extend(d.entries);
            }
        }
        prop_assert_eq!(got, report);
    }
}
