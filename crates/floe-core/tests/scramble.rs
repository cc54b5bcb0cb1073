//! Scrambled sequence IDs over millions of consecutive inputs: no repeats, every one decodes
//! back, and nothing of the input's order shows in the output.

use std::collections::HashSet;

use floe_core::scramble::{Domain, Keyring, Scrambler};

const KEY: &str = "1:7d2f6c0e9a4b13c58e0f21d3a6b9c4e7f0a1b2c3d4e5f60718293a4b5c6d7e8f";

/// Consecutive inputs `1..=n` (what a sequence issues) through `domain`.
fn scrambled(domain: Domain, n: u64) -> (Scrambler, Vec<u64>) {
    let s = Scrambler::new(domain, &Keyring::parse(KEY).unwrap());
    let out = (1..=n).map(|v| s.scramble(v).unwrap()).collect();
    (s, out)
}

/// Spearman's rank correlation of the outputs against their inputs' order (which is 0..n).
fn rank_correlation(out: &[u64]) -> f64 {
    let n = out.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&i| out[i]);
    let mut d2 = 0f64;
    for (rank, &i) in order.iter().enumerate() {
        let d = rank as f64 - i as f64;
        d2 += d * d;
    }
    let n = n as f64;
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

fn check_no_visible_order(domain: Domain, out: &[u64]) {
    // Half the steps go up, half down (a sequence would go up every time).
    let ups = out.windows(2).filter(|w| w[1] > w[0]).count() as f64 / (out.len() - 1) as f64;
    assert!(
        (0.495..0.505).contains(&ups),
        "{domain}: {ups} of steps go up"
    );
    // No rank correlation with the input.
    let rho = rank_correlation(out);
    assert!(rho.abs() < 0.005, "{domain}: rank correlation {rho}");
    // The outputs spread over the whole domain: each tenth of it holds about a tenth.
    let mut tenths = [0usize; 10];
    for &v in out {
        tenths[(u128::from(v) * 10 / (u128::from(domain.max()) + 1)) as usize] += 1;
    }
    for (i, &t) in tenths.iter().enumerate() {
        let share = t as f64 / out.len() as f64;
        assert!(
            (0.095..0.105).contains(&share),
            "{domain}: tenth {i} holds {share}"
        );
    }
    // Consecutive inputs differ in one bit or so; their outputs in about half their bits.
    let bits = ((domain.max() as f64) + 1.0).log2().floor();
    let mean_flips = out
        .windows(2)
        .map(|w| f64::from((w[0] ^ w[1]).count_ones()))
        .sum::<f64>()
        / (out.len() - 1) as f64;
    assert!(
        (mean_flips / bits - 0.5).abs() < 0.06,
        "{domain}: consecutive outputs differ in {mean_flips} of {bits} bits on average"
    );
}

#[test]
fn two_million_int63_ids_no_repeat_round_trip_and_show_no_order() {
    let (s, out) = scrambled(Domain::Int63, 2_000_000);
    let distinct: HashSet<u64> = out.iter().copied().collect();
    assert_eq!(distinct.len(), out.len(), "a scrambled ID repeated");
    assert!(out.iter().all(|&v| v <= i64::MAX as u64));
    for (i, &v) in out.iter().enumerate() {
        assert_eq!(s.unscramble_with(1, v).unwrap(), i as u64 + 1);
    }
    check_no_visible_order(Domain::Int63, &out);
    // The text form round-trips too.
    for v in [0, 1, 2, i64::MAX as u64] {
        assert_eq!(s.decode(&s.encode(v).unwrap()).unwrap(), v);
    }
}

#[test]
fn a_million_ten_digit_ids_no_repeat_round_trip_and_show_no_order() {
    let (s, out) = scrambled(Domain::digits(10).unwrap(), 1_000_000);
    let distinct: HashSet<u64> = out.iter().copied().collect();
    assert_eq!(distinct.len(), out.len(), "a scrambled ID repeated");
    assert!(out.iter().all(|&v| v <= 9_999_999_999));
    for (i, &v) in out.iter().enumerate().step_by(7) {
        let text = s.encode(i as u64 + 1).unwrap();
        assert_eq!(text.len(), 11);
        assert_eq!(text[1..].parse::<u64>().unwrap(), v);
        assert_eq!(s.decode(&text).unwrap(), i as u64 + 1);
    }
    check_no_visible_order(Domain::digits(10).unwrap(), &out);
}
