//! Property tests: every encode/decode pair round-trips and keeps order; no parser panics.

use floe_core::lexical::LexicalUuid;
use floe_core::sno::{
    unix_ms_of_wall, wall_of_unix_ms, Partition, SnoId, EPOCH_MS, MAX_TIMESTAMP, TIME_UNIT_MS,
};
use floe_core::snowflake::{Layout, SnowflakeParts};
use proptest::prelude::*;

fn layouts() -> impl Strategy<Value = Layout> {
    prop_oneof![
        Just(Layout::LEAF),
        Just(Layout::TWITTER),
        Just(Layout::FLAKE_IDGEN),
        Just(Layout::FLAKE_IDGEN.with_epoch_ms(1_300_000_000_000)),
        (
            1u8..=45,
            0u8..=8,
            0u8..=10,
            1u8..=22,
            0u64..1_600_000_000_000,
            1u64..=10
        )
            // Valid layouts only: 64 bits in all, and a last time RFC 3339 can write (a 45-bit
            // timestamp of 10 ms units reaches past 9999).
            .prop_filter_map("a valid layout", |(ts, dc, w, seq, epoch, unit)| {
                Layout::new(ts, dc, w, seq)
                    .ok()
                    .map(|l| l.with_epoch_ms(epoch).with_time_unit_ms(unit))
                    .filter(|l| l.validate().is_ok())
            }),
    ]
}

fn parts_in(layout: Layout) -> impl Strategy<Value = SnowflakeParts> {
    (
        0..=layout.max_timestamp(),
        0..=layout.max_datacenter(),
        0..=layout.max_worker(),
        0..=layout.max_sequence(),
    )
        .prop_map(
            move |(units, datacenter, worker, sequence)| SnowflakeParts {
                timestamp_ms: layout.epoch_ms() + units * layout.time_unit_ms(),
                datacenter,
                worker,
                sequence,
            },
        )
}

proptest! {
    #[test]
    fn snowflake_round_trip((layout, parts) in layouts().prop_flat_map(|l| (Just(l), parts_in(l)))) {
        let id = layout.encode(parts).unwrap();
        prop_assert_eq!(layout.decode(id), parts);
        prop_assert!(!layout.has_stray_bits(id));
        if layout.fits_i64() {
            prop_assert!(id <= i64::MAX as u64);
        }
    }

    #[test]
    fn snowflake_order_follows_time_then_node_then_sequence(
        (layout, a, b) in layouts().prop_flat_map(|l| (Just(l), parts_in(l), parts_in(l)))
    ) {
        let key = |p: &SnowflakeParts| (p.timestamp_ms, p.datacenter, p.worker, p.sequence);
        let (ia, ib) = (layout.encode(a).unwrap(), layout.encode(b).unwrap());
        prop_assert_eq!(ia.cmp(&ib), key(&a).cmp(&key(&b)));
    }

    #[test]
    fn sno_bytes_text_round_trip(bytes in any::<[u8; 10]>()) {
        let id = SnoId::from_bytes(bytes);
        let text = id.to_string();
        prop_assert_eq!(text.len(), 16);
        prop_assert!(text.bytes().all(|c| matches!(c, b'2'..=b'9' | b'a'..=b'x')));
        prop_assert_eq!(text.parse::<SnoId>().unwrap(), id);
        prop_assert_eq!(SnoId::from_slice(&id.to_bytes()).unwrap(), id);
        let json = serde_json::to_string(&id).unwrap();
        prop_assert_eq!(serde_json::from_str::<SnoId>(&json).unwrap(), id);
    }

    #[test]
    fn sno_text_order_is_byte_order(a in any::<[u8; 10]>(), b in any::<[u8; 10]>()) {
        let (a, b) = (SnoId::from_bytes(a), SnoId::from_bytes(b));
        prop_assert_eq!(a.cmp(&b), a.to_string().cmp(&b.to_string()));
        prop_assert_eq!(a.cmp(&b), a.to_bytes().cmp(&b.to_bytes()));
    }

    #[test]
    fn sno_parts_round_trip(
        units in 0..=MAX_TIMESTAMP, tick in any::<bool>(), meta in any::<u8>(),
        partition in any::<u16>(), sequence in any::<u16>(),
    ) {
        let id = SnoId::from_parts(units, tick, meta, Partition::from_u16(partition), sequence);
        prop_assert_eq!(id.timestamp_units(), units);
        prop_assert_eq!(id.tick_tock(), tick);
        prop_assert_eq!(id.meta(), meta);
        prop_assert_eq!(id.partition().as_u16(), partition);
        prop_assert_eq!(id.sequence(), sequence);
    }

    #[test]
    fn sno_unit_times_round_trip(units in 0..=MAX_TIMESTAMP) {
        let ms = unix_ms_of_wall(units as i64);
        prop_assert_eq!(wall_of_unix_ms(ms), units as i64);
        prop_assert_eq!(wall_of_unix_ms(ms + TIME_UNIT_MS - 1), units as i64);
        let id = SnoId::from_parts(units, false, 0, Partition::from_u16(0), 0);
        prop_assert_eq!(u128::from(ms) * 1_000_000, u128::from(id.timestamp_unix_ns()));
    }

    #[test]
    fn sno_unit_of_any_ms_is_in_range_and_holds_it(ms in any::<u64>()) {
        let units = wall_of_unix_ms(ms);
        prop_assert!((0..=MAX_TIMESTAMP as i64).contains(&units));
        let start = unix_ms_of_wall(units);
        let in_range = ms >= EPOCH_MS && ms < unix_ms_of_wall(MAX_TIMESTAMP as i64) + TIME_UNIT_MS;
        if in_range {
            prop_assert!(start <= ms && ms < start + TIME_UNIT_MS);
        } else {
            prop_assert!(units == 0 || units == MAX_TIMESTAMP as i64);
        }
    }

    #[test]
    fn sno_parse_never_panics(s in ".{0,40}") {
        match s.parse::<SnoId>() {
            Ok(id) => prop_assert_eq!(id.to_string(), s),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn sno_parse_rejects_any_char_outside_the_alphabet(
        bytes in any::<[u8; 10]>(), index in 0usize..16, bad in any::<char>()
    ) {
        prop_assume!(!matches!(bad, '2'..='9' | 'a'..='x'));
        let mut text: Vec<char> = SnoId::from_bytes(bytes).to_string().chars().collect();
        text[index] = bad;
        let text: String = text.into_iter().collect();
        prop_assert!(text.parse::<SnoId>().is_err());
    }

    #[test]
    fn lexical_round_trip(timestamp in any::<i64>(), worker in any::<i64>()) {
        let id = LexicalUuid::new(timestamp, worker);
        let text = id.to_string();
        prop_assert_eq!(text.len(), 35);
        prop_assert_eq!(text.parse::<LexicalUuid>().unwrap(), id);
        prop_assert_eq!(text.replace('-', "").parse::<LexicalUuid>().unwrap(), id);
        prop_assert_eq!(LexicalUuid::from_bytes(id.to_bytes()), id);
    }

    #[test]
    fn lexical_order_is_byte_and_text_order_for_non_negative(
        a in (0..i64::MAX, 0..i64::MAX), b in (0..i64::MAX, 0..i64::MAX)
    ) {
        let (a, b) = (LexicalUuid::new(a.0, a.1), LexicalUuid::new(b.0, b.1));
        prop_assert_eq!(a.cmp(&b), a.to_bytes().cmp(&b.to_bytes()));
        prop_assert_eq!(a.cmp(&b), a.to_string().cmp(&b.to_string()));
    }

    #[test]
    fn lexical_parse_never_panics(s in ".{0,40}") {
        let _ = s.parse::<LexicalUuid>();
    }
}

mod sequence {
    use floe_core::sequence::{reserve_after, Key, KeyError, Segment, StepPolicy, MAX_KEY_LEN};
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        /// A key is accepted exactly when it is 1 to 255 bytes with no NUL, and kept as given.
        #[test]
        fn keys_are_checked_and_kept(text in "(?s).{0,300}") {
            match Key::new(text.as_str()) {
                Ok(k) => {
                    prop_assert!(!text.is_empty() && text.len() <= MAX_KEY_LEN && !text.contains('\0'));
                    prop_assert_eq!(k.as_str(), text.as_str());
                    prop_assert_eq!(k.as_str().parse::<Key>().unwrap(), k);
                }
                Err(KeyError::Empty) => prop_assert!(text.is_empty()),
                Err(KeyError::TooLong { len }) => {
                    prop_assert_eq!(len, text.len());
                    prop_assert!(len > MAX_KEY_LEN);
                }
                Err(KeyError::Nul { index }) => prop_assert_eq!(text.as_bytes()[index], 0),
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
            }
        }

        /// A reservation never wraps, and its segment holds exactly the values it reserved.
        #[test]
        fn reservations_never_wrap(current in 0i64.., n in 1u32..) {
            match reserve_after(current, n) {
                Some(next) => {
                    prop_assert_eq!(i128::from(next), i128::from(current) + i128::from(n));
                    let s = Segment::ending_at(next, n);
                    prop_assert_eq!((s.start, s.end, s.len()), (current + 1, next, u64::from(n)));
                }
                None => prop_assert!(i128::from(current) + i128::from(n) > i128::from(i64::MAX)),
            }
        }

        /// The step always stays within its bounds, whatever it was and however long it lasted.
        #[test]
        fn steps_stay_within_bounds(min in 1u32..10_000, extra in 0u32..1_000_000, step: u32, ms in 0u64..10_000_000) {
            let p = StepPolicy { min, max: min + extra, target: Duration::from_secs(60) };
            prop_assert!(p.validate().is_ok());
            let next = p.next_step(step, Duration::from_millis(ms));
            prop_assert!((p.min..=p.max).contains(&next));
        }
    }
}

/// `text` read back by `T`'s own parser, and its kind told from the text alone.
fn text_round_trip<T: floe_core::IdText + PartialEq + std::fmt::Debug>(
    id: &T,
    kind: floe_core::IdKind,
) -> Result<(), TestCaseError> {
    let mut text = String::new();
    id.write_text(&mut text);
    prop_assert_eq!(&T::parse_text(&text).unwrap(), id, "{}", text);
    let detected = floe_core::IdKind::detect(&text);
    // 16 digits of 2-9 are sno's text; `--format snowflake` reads them as a number.
    let sno_like = text.len() == 16 && text.bytes().all(|c| (b'2'..=b'9').contains(&c));
    if kind == floe_core::IdKind::Snowflake && sno_like {
        prop_assert_eq!(detected, Ok(floe_core::IdKind::Sno), "{}", text);
    } else {
        prop_assert_eq!(detected, Ok(kind), "{}", text);
    }
    Ok(())
}

proptest! {
    /// Every kind's ID writes a text its parser reads back, and that `IdKind::detect` names
    /// (floe inspect's detection, declared once in floe-core).
    #[test]
    fn every_kind_reads_back_its_text_and_is_detected_from_it(
        snowflake: u64,
        sno: [u8; 10],
        lexical: [u8; 16],
        uuid: [u8; 16],
        ulid: u128,
    ) {
        use floe_core::IdKind;
        text_round_trip(&snowflake, IdKind::Snowflake)?;
        text_round_trip(&SnoId::from_bytes(sno), IdKind::Sno)?;
        text_round_trip(&LexicalUuid::from_bytes(lexical), IdKind::Lexical)?;
        text_round_trip(&floe_core::uuid7::Uuid::from_bytes(uuid), IdKind::Uuid7)?;
        text_round_trip(&floe_core::ulid::Ulid(ulid), IdKind::Ulid)?;
    }
}

#[test]
fn detection_names_what_it_cannot_tell() {
    use floe_core::kind::Undetected;
    use floe_core::IdKind;
    assert_eq!(IdKind::detect(""), Err(Undetected::Empty));
    assert_eq!(
        IdKind::detect("0123456789abcdef0123456789abcdef"),
        Err(Undetected::Ambiguous)
    );
    assert_eq!(IdKind::detect("hello"), Err(Undetected::Unrecognised));
    // Characters, not bytes: 16 characters with one outside ASCII are a (bad) sno.
    assert_eq!(IdKind::detect("brpk4q72xwf2m63é"), Ok(IdKind::Sno));
    assert_eq!(IdKind::detect("0x1f"), Ok(IdKind::Snowflake));
    assert_eq!(
        IdKind::detect("0XARZ3NDEKTSV4RRFFQ69G5FAV"),
        Ok(IdKind::Ulid)
    );
}
