//! A tiny seeded PRNG (splitmix64): the same seed gives the same choices.

/// A splitmix64 generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator derived from a seed and a path of indexes (worker, task).
    pub fn derive(seed: u64, path: &[u64]) -> Rng {
        let mut rng = Rng::new(seed);
        for &p in path {
            let x = rng.next_u64() ^ p.wrapping_mul(0xA24B_AED4_963E_E407);
            rng = Rng::new(x);
        }
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next_u64() % items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_same_numbers() {
        let a: Vec<u64> = (0..5).map(|_| Rng::derive(7, &[1, 2]).next_u64()).collect();
        assert!(a.iter().all(|&x| x == a[0]));
        assert_ne!(
            Rng::derive(7, &[1, 2]).next_u64(),
            Rng::derive(7, &[2, 1]).next_u64()
        );
    }
}
