//! Delay before the next attempt: exponential backoff with jitter.

use std::time::Duration;

use plan_graph::{Jitter, RetryPolicy};

/// A number in [0, 1) for the jitter of `attempt` of `step`: drawn at random, or with a seed
/// derived from the seed, the step and the attempt alone, so a seeded run's delays are the
/// same whatever the timing.
pub(crate) fn jitter_unit(seed: Option<u64>, step: &str, attempt: u32) -> f64 {
    match seed {
        None => fastrand::f64(),
        Some(seed) => {
            // FNV-1a: stable across builds and platforms, unlike std's hasher.
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
            for byte in step.bytes().chain(attempt.to_le_bytes()) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
            fastrand::Rng::with_seed(hash).f64()
        }
    }
}

/// The delay after failed attempt `attempt` (1-based). `floor` is a least delay the tool
/// asked for (HTTP `Retry-After`); the policy's cap still applies. `unit` (in [0, 1)) picks
/// the point within the jitter's band.
pub(crate) fn delay(
    policy: &RetryPolicy,
    attempt: u32,
    floor: Option<Duration>,
    unit: f64,
) -> Duration {
    let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
    let cap = policy.max_backoff_ms as f64;
    let base = (policy.backoff_ms as f64 * policy.multiplier.powi(exponent)).min(cap);
    let jittered = match policy.jitter {
        Jitter::None => base,
        Jitter::Full => unit * base,
        Jitter::Equal => base / 2.0 + unit * base / 2.0,
    };
    let millis = jittered
        .max(floor.map_or(0.0, |f| f.as_millis() as f64))
        .min(cap);
    Duration::from_millis(millis.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(jitter: Jitter) -> RetryPolicy {
        RetryPolicy {
            attempts: 5,
            backoff_ms: 100,
            max_backoff_ms: 1_000,
            multiplier: 2.0,
            jitter,
        }
    }

    #[test]
    fn grows_exponentially_up_to_the_cap() {
        let p = policy(Jitter::None);
        let delays: Vec<u128> = (1..=6)
            .map(|a| delay(&p, a, None, 0.5).as_millis())
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn jitter_stays_within_its_band() {
        for _ in 0..200 {
            let unit = jitter_unit(None, "s", 3);
            let full = delay(&policy(Jitter::Full), 3, None, unit).as_millis();
            assert!(full <= 400);
            let equal = delay(&policy(Jitter::Equal), 3, None, unit).as_millis();
            assert!((200..=400).contains(&equal));
        }
        assert_eq!(delay(&policy(Jitter::Full), 3, None, 0.0).as_millis(), 0);
        assert_eq!(delay(&policy(Jitter::Equal), 3, None, 0.0).as_millis(), 200);
    }

    #[test]
    fn a_seed_fixes_the_jitter_per_step_and_attempt() {
        let a = jitter_unit(Some(7), "fetch", 1);
        assert_eq!(a, jitter_unit(Some(7), "fetch", 1));
        assert!((0.0..1.0).contains(&a));
        assert_ne!(a, jitter_unit(Some(7), "fetch", 2));
        assert_ne!(a, jitter_unit(Some(7), "other", 1));
        assert_ne!(a, jitter_unit(Some(8), "fetch", 1));
    }

    #[test]
    fn a_requested_floor_wins_below_the_cap() {
        let p = policy(Jitter::Full);
        assert_eq!(
            delay(&p, 1, Some(Duration::from_millis(700)), 0.5).as_millis(),
            700
        );
        assert_eq!(
            delay(&p, 1, Some(Duration::from_secs(30)), 0.5).as_millis(),
            1000
        );
    }
}
