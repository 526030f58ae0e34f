//! Delay before the next attempt: exponential backoff with jitter.

use std::time::Duration;

use plan_graph::{Jitter, RetryPolicy};

/// The delay after failed attempt `attempt` (1-based). `floor` is a least delay the tool
/// asked for (HTTP `Retry-After`); the policy's cap still applies.
pub(crate) fn delay(policy: &RetryPolicy, attempt: u32, floor: Option<Duration>) -> Duration {
    let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
    let cap = policy.max_backoff_ms as f64;
    let base = (policy.backoff_ms as f64 * policy.multiplier.powi(exponent)).min(cap);
    let jittered = match policy.jitter {
        Jitter::None => base,
        Jitter::Full => fastrand::f64() * base,
        Jitter::Equal => base / 2.0 + fastrand::f64() * base / 2.0,
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
        let delays: Vec<u128> = (1..=6).map(|a| delay(&p, a, None).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn jitter_stays_within_its_band() {
        for _ in 0..200 {
            let full = delay(&policy(Jitter::Full), 3, None).as_millis();
            assert!(full <= 400);
            let equal = delay(&policy(Jitter::Equal), 3, None).as_millis();
            assert!((200..=400).contains(&equal));
        }
    }

    #[test]
    fn a_requested_floor_wins_below_the_cap() {
        let p = policy(Jitter::Full);
        assert_eq!(
            delay(&p, 1, Some(Duration::from_millis(700))).as_millis(),
            700
        );
        assert_eq!(
            delay(&p, 1, Some(Duration::from_secs(30))).as_millis(),
            1000
        );
    }
}
