//! The cache-policy simulator behind `spillway cache sim`: replays key-access traces
//! through cache policies at several capacities and reports hit ratios, to hold the
//! store's W-TinyLFU L1 cache against the well-known policies.
//!
//! Each line of a trace is a read: `get(key)`, and on a miss the key is inserted with
//! weight 1. Hit ratio = hits / all lines; capacity is counted in entries.
//!
//! - [`trace`]: reading traces (text, one `u64` per line, plain or gzip).
//! - [`capacity`]: `5000` or `5%` of a trace's distinct keys.
//! - [`run`](mod@run): running the (trace, capacity, policy) cells, in parallel.
//! - [`summary`]: the table, mean hit ratios, W-TinyLFU's per-cell target.
//! - The policies, each after the class of Caffeine's simulator that its module names:
//!   [`lru`], [`arc`], [`s3fifo`], [`lirs`], and the store's own [`wtinylfu`].
//!   They share `list`: a slab of nodes with `u32` links and a `u64` key map, so an
//!   access is O(1) (LIRS: amortized) and allocates nothing once warm.

pub mod arc;
pub mod capacity;
mod error;
pub mod lirs;
mod list;
pub mod lru;
pub mod run;
pub mod s3fifo;
pub mod summary;
pub mod trace;
pub mod wtinylfu;

pub use capacity::Capacity;
pub use error::SimError;
pub use run::{run, SimConfig, SimRow};
pub use trace::Trace;

/// Every policy [`make`] knows.
pub const POLICIES: [&str; 7] =
    ["wtinylfu", "wtinylfu-fixed", "wtinylfu-caffeine", "lru", "arc", "s3fifo", "lirs"];

/// The policies run when none are named.
pub const DEFAULT_POLICIES: [&str; 5] = ["wtinylfu", "lru", "arc", "s3fifo", "lirs"];

/// A cache policy replayed by the simulator: it only tracks which keys are resident.
pub trait Policy: Send {
    /// The policy's name, as [`make`] takes it.
    fn name(&self) -> &'static str;

    /// Reads `key`: returns whether it was resident (a hit); on a miss inserts it with
    /// weight 1, evicting as the policy decides.
    fn access(&mut self, key: u64) -> bool;

    /// Resident entries, if the policy tells.
    fn resident(&self) -> Option<usize> {
        None
    }
}

/// A fresh policy named `policy` (one of [`POLICIES`]) of `capacity` entries (at least
/// 1); `seed` seeds randomized policies.
pub fn make(policy: &str, capacity: usize, seed: u64) -> Result<Box<dyn Policy>, SimError> {
    let capacity = capacity.max(1);
    Ok(match policy {
        "wtinylfu" => Box::new(wtinylfu::WTinyLfu::adaptive(capacity, seed)),
        "wtinylfu-fixed" => Box::new(wtinylfu::WTinyLfu::fixed(capacity, seed)),
        "wtinylfu-caffeine" => Box::new(wtinylfu::WTinyLfu::caffeine(capacity, seed)),
        "lru" => Box::new(lru::Lru::new(capacity)),
        "arc" => Box::new(arc::Arc::new(capacity)),
        "s3fifo" => Box::new(s3fifo::S3Fifo::new(capacity)),
        "lirs" => Box::new(lirs::Lirs::new(capacity)),
        _ => return Err(SimError::UnknownPolicy { name: policy.to_string() }),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The hit/miss pattern of `keys` as `h`/`m`.
    pub(crate) fn pattern(p: &mut dyn Policy, keys: &[u64]) -> String {
        keys.iter().map(|&k| if p.access(k) { 'h' } else { 'm' }).collect()
    }

    /// The policies written here (W-TinyLFU is tested in the store).
    const REFERENCE: [&str; 4] = ["lru", "arc", "s3fifo", "lirs"];

    #[test]
    fn make_knows_every_policy_and_names_them() {
        for name in POLICIES {
            assert_eq!(make(name, 10, 1).unwrap().name(), name);
        }
        let e = make("clock", 10, 1).err().unwrap().to_string();
        assert_eq!(
            e,
            "unknown policy `clock`; known policies: wtinylfu, wtinylfu-fixed, \
             wtinylfu-caffeine, lru, arc, s3fifo, lirs"
        );
    }

    #[test]
    fn a_repeated_key_hits_at_every_capacity() {
        for name in REFERENCE {
            for cap in [1, 2, 3, 10] {
                let mut p = make(name, cap, 1).unwrap();
                let got = pattern(p.as_mut(), &[5, 5, 6, 6, 5]);
                assert_eq!(&got[..4], "mhmh", "{name} at {cap}");
            }
        }
    }

    #[test]
    fn everything_fits_when_capacity_covers_the_keys() {
        // With room for every key, each policy misses each key once (LIRS, ARC and
        // S3-FIFO only ever evict when full).
        let keys: Vec<u64> = (0..2000u64).map(|i| (i * 31) % 97).collect();
        for name in REFERENCE {
            let mut p = make(name, 97, 1).unwrap();
            let misses = pattern(p.as_mut(), &keys).matches('m').count();
            assert_eq!(misses, 97, "{name}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// No policy holds more than `capacity` entries, and a key accessed twice in a
        /// row hits the second time (the miss inserted it; nothing ran in between).
        #[test]
        fn resident_is_bounded_and_immediate_rereads_hit(
            capacity in 1usize..40,
            keys in proptest::collection::vec(0u64..80, 1..600),
        ) {
            for name in REFERENCE {
                let mut p = make(name, capacity, 7).unwrap();
                for &k in &keys {
                    p.access(k);
                    let resident = p.resident().unwrap();
                    prop_assert!(resident <= capacity, "{} holds {} > {}", name, resident, capacity);
                    prop_assert!(p.access(k), "{} missed {} right after reading it", name, k);
                }
            }
        }

        /// Skewed keys over a larger range, where ghosts and non-resident entries churn.
        #[test]
        fn skewed_traces_keep_the_bound(
            capacity in 1usize..64,
            keys in proptest::collection::vec((0u32..10, 0u64..2000), 1..2000),
        ) {
            for name in REFERENCE {
                let mut p = make(name, capacity, 7).unwrap();
                for &(hot, k) in &keys {
                    let k = if hot < 6 { k % 20 } else { k };
                    p.access(k);
                    prop_assert!(p.resident().unwrap() <= capacity, "{}", name);
                }
            }
        }
    }
}
