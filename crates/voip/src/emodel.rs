//! Listening quality from network figures: the ITU-T G.107 E-model in the simplified form used
//! by passive monitors (R-factor from delay and loss only, every other parameter at its G.107
//! default), and its mapping to MOS.
//!
//! Sources and formulas:
//! - G.107 (06/2015) §7: R = Ro − Is − Id − Ie,eff + A. With every default value
//!   (Table 3) Ro − Is = 93.2 (the usual rounding of 94.77 − 1.41 − 0.15), and A = 0.
//! - Delay impairment Id: the simplification of Cole and Rosenbluth, "Voice over IP
//!   performance monitoring", ACM SIGCOMM CCR 31(2), 2001, eq. 5, fitted to G.107 with
//!   default echo parameters: Id = 0.024·d + 0.11·(d − 177.3)·H(d − 177.3), d the one-way
//!   mouth-to-ear delay in ms and H the unit step.
//! - Ie,eff = Ie + (95 − Ie) · Ppl / (Ppl / BurstR + Bpl) (G.107 eq. 7-29), Ppl the packet
//!   loss in percent, BurstR = 1 (random loss; a single capture point cannot tell burstiness
//!   reliably for short calls).
//! - Codec Ie and Bpl from ITU-T G.113 Appendix I (11/2009), Tables I.1 and I.3 (see
//!   [`codec`]).
//! - MOS (conversational quality estimate) from R, G.107 Annex B eq. B-4:
//!   MOS = 1 for R < 0; 1 + 0.035·R + R·(R − 60)·(100 − R)·7·10⁻⁶ for 0 ≤ R ≤ 100; 4.5 above.
//!
//! A passive monitor does not see the mouth-to-ear delay; [`quality`] takes the packetisation
//! time plus a jitter buffer of twice the measured mean jitter (at least one packet time) as
//! d — network delay before the capture point is not included, so R is an
//! upper bound for the delay part.

/// Equipment impairment and packet-loss robustness of a codec.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Codec {
    /// Equipment impairment factor Ie.
    pub ie: f64,
    /// Packet-loss robustness factor Bpl.
    pub bpl: f64,
}

/// Ie/Bpl by payload type or encoding name; `None` for codecs G.113 gives no values for
/// (no MOS is computed for them).
///
/// - G.711 (PCMU 0, PCMA 8) with packet loss concealment: Ie 0, Bpl 25.1 (G.113 Table I.3).
/// - G.729A (18) with VAD: Ie 11, Bpl 19.0 (Table I.3).
/// - G.723.1 at 6.3 kbit/s (4): Ie 15, Bpl 16.1 (Table I.3).
/// - GSM 06.10 full rate (3): Ie 20 (Table I.1); G.113 gives no Bpl: 10 assumed, the lowest
///   tabulated order of magnitude for codecs without concealment beyond G.711's 4.3.
/// - G.722 (9) is wideband; on the narrowband scale it is taken like G.711 with PLC.
pub fn codec(pt: u8, name: Option<&str>) -> Option<Codec> {
    let by_name = name.map(|n| n.to_ascii_uppercase());
    let key = match (pt, by_name.as_deref()) {
        (0 | 8, _) | (_, Some("PCMU" | "PCMA")) => "G711",
        (18, _) | (_, Some("G729")) => "G729",
        (4, _) | (_, Some("G723")) => "G723",
        (3, _) | (_, Some("GSM")) => "GSM",
        (9, _) | (_, Some("G722")) => "G711",
        _ => return None,
    };
    Some(match key {
        "G711" => Codec { ie: 0.0, bpl: 25.1 },
        "G729" => Codec {
            ie: 11.0,
            bpl: 19.0,
        },
        "G723" => Codec {
            ie: 15.0,
            bpl: 16.1,
        },
        _ => Codec {
            ie: 20.0,
            bpl: 10.0,
        },
    })
}

/// R-factor from one-way delay `delay_ms` and packet loss `loss_pct` (0–100) for `c`.
pub fn r_factor(c: Codec, delay_ms: f64, loss_pct: f64) -> f64 {
    let d = delay_ms.max(0.0);
    let id = 0.024 * d + if d > 177.3 { 0.11 * (d - 177.3) } else { 0.0 };
    let ppl = loss_pct.clamp(0.0, 100.0);
    let ie_eff = c.ie + (95.0 - c.ie) * ppl / (ppl + c.bpl);
    93.2 - id - ie_eff
}

/// MOS from R (G.107 Annex B eq. B-4).
pub fn mos(r: f64) -> f64 {
    if r < 0.0 {
        1.0
    } else if r > 100.0 {
        4.5
    } else {
        1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6
    }
}

/// R-factor and MOS of a stream: packetisation time `ptime_ms`, mean jitter, loss in percent.
/// The delay is the packetisation time plus a jitter buffer of max(2 × mean jitter, ptime).
pub fn quality(c: Codec, ptime_ms: f64, mean_jitter_ms: f64, loss_pct: f64) -> (f64, f64) {
    let d = ptime_ms + (2.0 * mean_jitter_ms).max(ptime_ms);
    let r = r_factor(c, d, loss_pct);
    (r, mos(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_points() {
        let g711 = codec(0, None).unwrap();
        // no loss, 40 ms: Id = 0.96 → R = 92.24; MOS = 1 + 3.2284 + 92.24·32.24·7.76·7e-6 = 4.3899
        let r = r_factor(g711, 40.0, 0.0);
        assert!((r - 92.24).abs() < 1e-9);
        let want = 1.0 + 0.035 * 92.24 + 92.24 * 32.24 * 7.76 * 7e-6;
        assert!((mos(r) - want).abs() < 1e-9);
        assert!((mos(r) - 4.3899).abs() < 1e-4);
        // G.729, 1 % loss, 200 ms: Id = 4.8 + 0.11·22.7 = 7.297; Ie,eff = 11 + 84·1/20 = 15.2
        let r = r_factor(codec(18, None).unwrap(), 200.0, 1.0);
        assert!((r - (93.2 - 7.297 - 15.2)).abs() < 1e-9);
        assert_eq!(mos(-5.0), 1.0);
        assert_eq!(mos(120.0), 4.5);
        assert!(codec(101, Some("telephone-event")).is_none());
        assert_eq!(codec(96, Some("pcma")), codec(8, None));
    }
}
