//! Frame sizes of a synthetic stream: one fixed size, the simple IMIX, or a uniform range.
//!
//! Sizes are Ethernet frame lengths as captured, *without* the 4-byte FCS: a "64-byte frame" of
//! the usual tables is 60 here, exactly what tcpdump and tshark show as the frame length.

use std::str::FromStr;

/// The simple IMIX (7:4:1 of 64, 594 and 1518-byte frames with FCS), as captured lengths.
pub const IMIX: [(usize, u32); 3] = [(60, 7), (590, 4), (1514, 1)];

/// How frame sizes are chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeMix {
    /// Every frame this long.
    Fixed(usize),
    /// The simple IMIX, in a repeating 12-frame pattern (7 small, 4 medium, 1 large, spread out).
    Imix,
    /// Uniformly drawn from `lo..=hi` by a seeded generator (repeatable).
    Uniform {
        /// Smallest size.
        lo: usize,
        /// Largest size.
        hi: usize,
    },
}

impl FromStr for SizeMix {
    type Err = String;

    /// `60`, `imix`, or `LO-HI`.
    fn from_str(s: &str) -> Result<SizeMix, String> {
        let bad = || format!("bad size '{s}': expected N, imix or LO-HI");
        if s.eq_ignore_ascii_case("imix") {
            return Ok(SizeMix::Imix);
        }
        if let Some((lo, hi)) = s.split_once('-') {
            let lo = lo.trim().parse().map_err(|_| bad())?;
            let hi = hi.trim().parse().map_err(|_| bad())?;
            if lo > hi {
                return Err(bad());
            }
            return Ok(SizeMix::Uniform { lo, hi });
        }
        s.trim().parse().map(SizeMix::Fixed).map_err(|_| bad())
    }
}

impl SizeMix {
    /// Largest frame a mix may ask for (without FCS).
    pub const MAX_FRAME: usize = 65_535;

    /// Parses a mix (see [`FromStr`]) whose frames are 1 to [`MAX_FRAME`](Self::MAX_FRAME)
    /// bytes long.
    pub fn parse_frames(s: &str) -> Result<SizeMix, String> {
        let mix: SizeMix = s.parse()?;
        let too_big = match &mix {
            SizeMix::Fixed(n) => *n == 0 || *n > Self::MAX_FRAME,
            SizeMix::Uniform { lo, hi } => *lo == 0 || *hi > Self::MAX_FRAME,
            SizeMix::Imix => false,
        };
        if too_big {
            return Err(format!("bad size '{s}': frames are 1 to 65535 bytes"));
        }
        Ok(mix)
    }
}

/// Draws sizes from a [`SizeMix`].
#[derive(Clone, Debug)]
pub struct Sizes {
    mix: SizeMix,
    n: u64,
    rng: u64,
}

/// The IMIX pattern, small/medium/large interleaved: S M S M S L S M S S M S.
const IMIX_PATTERN: [usize; 12] = [0, 1, 0, 1, 0, 2, 0, 1, 0, 0, 1, 0];

impl Sizes {
    /// Starts drawing; `seed` makes uniform draws repeatable.
    pub fn new(mix: SizeMix, seed: u64) -> Sizes {
        Sizes {
            mix,
            n: 0,
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
        }
    }

    /// The smallest and largest size this mix yields.
    pub fn bounds(&self) -> (usize, usize) {
        match self.mix {
            SizeMix::Fixed(n) => (n, n),
            SizeMix::Imix => (IMIX[0].0, IMIX[2].0),
            SizeMix::Uniform { lo, hi } => (lo, hi),
        }
    }

    /// The next size.
    #[inline]
    pub fn next_size(&mut self) -> usize {
        let n = self.n;
        self.n += 1;
        match self.mix {
            SizeMix::Fixed(s) => s,
            SizeMix::Imix => IMIX[IMIX_PATTERN[(n % 12) as usize]].0,
            SizeMix::Uniform { lo, hi } => {
                // xorshift64*
                self.rng ^= self.rng >> 12;
                self.rng ^= self.rng << 25;
                self.rng ^= self.rng >> 27;
                let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
                lo + (r % (hi - lo + 1) as u64) as usize
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_sizes_are_1_to_65535() {
        assert_eq!(SizeMix::parse_frames("65535"), Ok(SizeMix::Fixed(65_535)));
        assert_eq!(SizeMix::parse_frames("IMIX"), Ok(SizeMix::Imix));
        assert_eq!(
            SizeMix::parse_frames("60-1514"),
            Ok(SizeMix::Uniform { lo: 60, hi: 1514 })
        );
        for bad in ["0", "65536", "0-10", "60-70000"] {
            assert_eq!(
                SizeMix::parse_frames(bad),
                Err(format!("bad size '{bad}': frames are 1 to 65535 bytes"))
            );
        }
        assert_eq!(
            SizeMix::parse_frames("x"),
            Err("bad size 'x': expected N, imix or LO-HI".into())
        );
    }

    #[test]
    fn parse() {
        assert_eq!("60".parse(), Ok(SizeMix::Fixed(60)));
        assert_eq!("IMIX".parse(), Ok(SizeMix::Imix));
        assert_eq!("64-128".parse(), Ok(SizeMix::Uniform { lo: 64, hi: 128 }));
        assert!("128-64".parse::<SizeMix>().is_err());
        assert!("big".parse::<SizeMix>().is_err());
    }

    #[test]
    fn imix_proportions() {
        let mut s = Sizes::new(SizeMix::Imix, 1);
        let v: Vec<usize> = (0..1200).map(|_| s.next_size()).collect();
        for (size, weight) in IMIX {
            assert_eq!(
                v.iter().filter(|&&x| x == size).count(),
                100 * weight as usize
            );
        }
    }

    #[test]
    fn uniform_stays_in_range_and_repeats() {
        let draw = |seed| {
            let mut s = Sizes::new(SizeMix::Uniform { lo: 100, hi: 103 }, seed);
            (0..400).map(|_| s.next_size()).collect::<Vec<_>>()
        };
        let a = draw(3);
        assert!(a.iter().all(|&x| (100..=103).contains(&x)));
        for v in 100..=103 {
            assert!(a.contains(&v), "{v} drawn");
        }
        assert_eq!(a, draw(3));
    }
}
