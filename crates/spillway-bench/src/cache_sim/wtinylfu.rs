//! `wtinylfu`, `wtinylfu-fixed` and `wtinylfu-caffeine`: the store's own L1 cache,
//! [`spillway_store::cache::WTinyLfu`], driven as a policy. `wtinylfu` is the adaptive
//! cache (its window resized by hill climbing, as Caffeine's
//! `policy/sketch/climbing/HillClimberWindowTinyLfuPolicy`); `wtinylfu-fixed` keeps the
//! initial window (`CacheConfig::adaptive(false)`), for comparison;
//! `wtinylfu-caffeine` is Caffeine's `BoundedLocalCache` path exactly
//! (`CacheConfig::caffeine`: no doorkeeper, none of the module's departures), for
//! comparing with Caffeine's simulator (`product.Caffeine`).
//!
//! Each access is `get`; a miss inserts the key with weight 1, ignoring evictions.

use spillway_store::cache::{CacheConfig, WTinyLfu as Cache};

use super::Policy;

/// The store's W-TinyLFU cache over `u64` keys with no values.
pub struct WTinyLfu {
    name: &'static str,
    cache: Cache<u64, ()>,
}

impl WTinyLfu {
    /// The adaptive cache of `capacity` entries, its sketch seeded with `seed`.
    pub fn adaptive(capacity: usize, seed: u64) -> Self {
        WTinyLfu { name: "wtinylfu", cache: Cache::new(config(capacity, seed)) }
    }

    /// Caffeine's exact path.
    pub fn caffeine(capacity: usize, seed: u64) -> Self {
        WTinyLfu {
            name: "wtinylfu-caffeine",
            cache: Cache::new(CacheConfig::caffeine(capacity.max(1) as u64).seed(seed)),
        }
    }

    /// The cache with a fixed window.
    pub fn fixed(capacity: usize, seed: u64) -> Self {
        WTinyLfu {
            name: "wtinylfu-fixed",
            cache: Cache::new(config(capacity, seed).adaptive(false)),
        }
    }
}

fn config(capacity: usize, seed: u64) -> CacheConfig {
    CacheConfig::new(capacity.max(1) as u64).seed(seed)
}

impl std::fmt::Debug for WTinyLfu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WTinyLfu").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Policy for WTinyLfu {
    fn name(&self) -> &'static str {
        self.name
    }

    fn access(&mut self, key: u64) -> bool {
        if self.cache.get(&key).is_some() {
            return true;
        }
        self.cache.insert(key, (), 1, &mut |_k, _v| {});
        false
    }

    fn resident(&self) -> Option<usize> {
        Some(self.cache.len())
    }
}
