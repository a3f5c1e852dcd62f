//! From what a user asks to a [`Source`]: [`StreamSpec`] holds the settings of synthetic streams
//! as given (addresses, MACs and VLAN as text, an optional rate, count and duration) and builds
//! the [`Synth`], filling in the defaults (the interface's MAC, the destination's neighbour
//! entry, 1000 packets when neither a count nor a duration is given, top speed);
//! [`replay_pace`] and [`Replay::check_sendable`] do the same for a replay.

use std::net::IpAddr;

use weir_packet::LinkType;

use crate::frame::{FlowSpec, FrameBuilder, Proto};
use crate::mac::{interface_mac, neighbour_mac, parse_mac};
use crate::size::SizeMix;
use crate::source::{Rate, Replay, ReplayPace, Source, Synth, SynthConfig};
use crate::GenError;

/// Source MAC of frames written to a file, when none is given.
pub const FILE_SRC_MAC: &str = "02:00:00:00:00:01";
/// Destination MAC of frames written to a file, when none is given.
pub const FILE_DST_MAC: &str = "02:00:00:00:00:02";

/// The rate chosen among packets per second, megabits per second and top speed (in that order
/// of precedence), or `None` when none is given.
pub fn rate_of(pps: Option<f64>, mbps: Option<f64>, top: bool) -> Option<Rate> {
    match (pps, mbps) {
        (Some(p), _) => Some(Rate::Pps(p)),
        (None, Some(m)) => Some(Rate::Mbps(m)),
        (None, None) => top.then_some(Rate::Top),
    }
}

/// The pace of a replay: a multiplier of the recorded pace, else a fixed rate, else the
/// recorded pace itself.
pub fn replay_pace(multiplier: Option<f64>, rate: Option<Rate>) -> ReplayPace {
    match (multiplier, rate) {
        (Some(m), _) => ReplayPace::Recorded { multiplier: m },
        (None, Some(r)) => ReplayPace::Rate(r),
        (None, None) => ReplayPace::Recorded { multiplier: 1.0 },
    }
}

/// A TOS byte, decimal or `0x` hex.
pub fn parse_tos(s: &str) -> Result<u8, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("'{s}' is not a byte (0-255 or 0x00-0xff)"))
}

/// An 802.1Q tag, `VID` or `VID:PCP` (priority 0 when not given).
pub fn parse_vlan(s: &str) -> Result<(u16, u8), GenError> {
    let (vid, pcp) = s.split_once(':').unwrap_or((s, "0"));
    let vid = vid
        .parse()
        .map_err(|e| GenError::Config(format!("bad VLAN id '{vid}': {e}")))?;
    let pcp = pcp
        .parse()
        .map_err(|e| GenError::Config(format!("bad VLAN priority '{pcp}': {e}")))?;
    Ok((vid, pcp))
}

/// `--vlan VID[:PCP]` checked as the command line reads it: a VLAN id of 0 to 4095 and a
/// priority of 0 to 7, else a usage error naming the limits.
pub fn vlan_arg(s: &str) -> Result<String, String> {
    match parse_vlan(s) {
        Ok((vid, pcp)) if vid <= 4095 && pcp <= 7 => Ok(s.to_owned()),
        _ => Err(format!(
            "'{s}' is not a VLAN tag: give VID (0-4095) or VID:PRIORITY (priority 0-7)"
        )),
    }
}

/// Settings of synthetic streams, as a user gives them: with the `clap` feature, the options
/// of `weir gen` that describe its streams (doc comments are their help; every number goes
/// through a value parser that refuses what is out of range by name).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct StreamSpec {
    /// Rate in packets per second (all flows together).
    #[cfg_attr(feature = "clap", arg(long, value_name = "PPS", conflicts_with_all = ["mbps", "top"],
          value_parser = weir_packet::value::pps, allow_negative_numbers = true))]
    pub pps: Option<f64>,
    /// Rate in megabits per second of frames (all flows together).
    #[cfg_attr(feature = "clap", arg(long, value_name = "MBPS", conflicts_with = "top",
          value_parser = weir_packet::value::mbps, allow_negative_numbers = true))]
    pub mbps: Option<f64>,
    /// As fast as possible (the default for synthetic streams on an interface).
    #[cfg_attr(feature = "clap", arg(long))]
    pub top: bool,
    /// Stop after this many packets (synthetic streams; default: no limit with --duration,
    /// else 1000).
    #[cfg_attr(feature = "clap", arg(short = 'c', long = "count", value_name = "N",
          value_parser = weir_packet::value::count, allow_negative_numbers = true))]
    pub count: Option<u64>,
    /// Stop after this many seconds (planned time for files, wall time on an interface).
    #[cfg_attr(feature = "clap", arg(long = "duration", value_name = "SECONDS",
          value_parser = weir_packet::value::seconds, allow_negative_numbers = true))]
    pub duration_s: Option<f64>,
    /// Frame size without FCS, up to 65535: N, `imix` (60/590/1514 in 7:4:1) or a uniform
    /// range LO-HI. Not given: the smallest frame that holds the headers and the stamp (60;
    /// 64 with --vlan, 72 with --tcp, 80 with IPv6 addresses).
    #[cfg_attr(feature = "clap", arg(long = "size", default_value = "60", value_name = "SIZE",
          value_parser = SizeMix::parse_frames))]
    pub sizes: SizeMix,
    /// Number of flows (source ports sport, sport+1, ...), each its own stream.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..), allow_negative_numbers = true))]
    pub flows: u16,
    /// Number of source addresses (--src, --src + 1, ...): flow k comes from address
    /// --src + (k mod N). With many --flows, this gives the key diversity of real traffic
    /// (many clients, many source ports).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..), allow_negative_numbers = true))]
    pub hosts: u16,
    /// Stream id of the first flow.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0, value_name = "ID"))]
    pub stream: u16,
    /// Source address.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "10.0.0.1", value_name = "IP")
    )]
    pub src: IpAddr,
    /// Destination address.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "10.0.0.2", value_name = "IP")
    )]
    pub dst: IpAddr,
    /// Source port (of the first flow).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 40_000))]
    pub sport: u16,
    /// Destination port.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 9_000))]
    pub dport: u16,
    /// Source MAC (default: the interface's, 02:00:00:00:00:01 for files).
    #[cfg_attr(feature = "clap", arg(long, value_name = "MAC"))]
    pub src_mac: Option<String>,
    /// Destination MAC (default: the destination's neighbour entry on the interface, else
    /// broadcast; 02:00:00:00:00:02 for files).
    #[cfg_attr(feature = "clap", arg(long, value_name = "MAC"))]
    pub dst_mac: Option<String>,
    /// TOS byte / traffic class (decimal or 0x hex), e.g. 0xc0.
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_tos, default_value = "0"))]
    pub tos: u8,
    /// DSCP (0-63), sets the upper six bits of the TOS byte.
    #[cfg_attr(feature = "clap", arg(long, conflicts_with = "tos",
          value_parser = clap::value_parser!(u8).range(0..=63), allow_negative_numbers = true))]
    pub dscp: Option<u8>,
    /// TTL / hop limit.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 64))]
    pub ttl: u8,
    /// 802.1Q tag: VID or VID:PRIORITY.
    #[cfg_attr(feature = "clap", arg(long, value_name = "VID[:PCP]", value_parser = vlan_arg,
          allow_negative_numbers = true))]
    pub vlan: Option<String>,
    /// TCP-shaped segments instead of UDP datagrams.
    #[cfg_attr(feature = "clap", arg(long))]
    pub tcp: bool,
    /// Seed of the uniform size draws.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub seed: u64,
}

impl StreamSpec {
    /// The rate asked for ([`rate_of`]: packets per second, else megabits per second, else top
    /// speed), or `None` when none is given.
    pub fn rate(&self) -> Option<Rate> {
        rate_of(self.pps, self.mbps, self.top)
    }

    /// The source MAC and destination MAC of the frames: sent on `interface`, or written to a
    /// file when it is `None`. `warn` hears about a destination sent to the broadcast MAC.
    pub fn macs(
        &self,
        interface: Option<&str>,
        warn: &mut dyn FnMut(String),
    ) -> Result<([u8; 6], [u8; 6]), GenError> {
        let Some(i) = interface else {
            return Ok((
                parse_mac(self.src_mac.as_deref().unwrap_or(FILE_SRC_MAC))?,
                parse_mac(self.dst_mac.as_deref().unwrap_or(FILE_DST_MAC))?,
            ));
        };
        let src = match &self.src_mac {
            Some(m) => parse_mac(m)?,
            None => interface_mac(i)?,
        };
        let dst = match &self.dst_mac {
            Some(m) => parse_mac(m)?,
            None => neighbour_mac(i, self.dst).unwrap_or_else(|| {
                warn(format!(
                    "no neighbour entry for {} on {i}: sending to the broadcast MAC (routers will not forward it; give --dst-mac)",
                    self.dst
                ));
                [0xff; 6]
            }),
        };
        Ok((src, dst))
    }

    /// The flows, one per source port.
    pub fn flows(&self, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Result<Vec<FlowSpec>, GenError> {
        let vlan = self.vlan.as_deref().map(parse_vlan).transpose()?;
        let tos = match self.dscp {
            Some(d) if d > 63 => return Err(GenError::Config("--dscp must be 0-63".into())),
            Some(d) => d << 2,
            None => self.tos,
        };
        if self.flows == 0 {
            return Err(GenError::Config("--flows must be at least 1".into()));
        }
        if self.hosts == 0 {
            return Err(GenError::Config("--hosts must be at least 1".into()));
        }
        Ok((0..self.flows)
            .map(|k| FlowSpec {
                src_mac,
                dst_mac,
                vlan,
                src_ip: nth_address(self.src, u32::from(k % self.hosts)),
                dst_ip: self.dst,
                src_port: self.sport.wrapping_add(k),
                dst_port: self.dport,
                tos,
                ttl: self.ttl,
                proto: if self.tcp { Proto::Tcp } else { Proto::Udp },
            })
            .collect())
    }

    /// The smallest frame (without FCS) that holds a stream's headers (802.1Q with --vlan,
    /// IPv6 with IPv6 addresses, TCP with --tcp) and the stamp: 60 for untagged IPv4 UDP.
    /// Every flow of the spec has the same headers, so the first one tells.
    pub fn min_frame(&self) -> Result<usize, GenError> {
        let one = StreamSpec {
            flows: 1,
            ..self.clone()
        };
        let flow = one.flows([0; 6], [0; 6])?.remove(0);
        Ok(FrameBuilder::new(flow)?.min_len())
    }

    /// The settings of the [`Synth`], with the defaults filled in.
    pub fn config(&self, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Result<SynthConfig, GenError> {
        let duration_ns = self.duration_s.map(|d| (d * 1e9) as u64);
        let count = match (self.count, duration_ns) {
            (Some(c), _) => Some(c),
            (None, Some(_)) => None,
            (None, None) => Some(1000),
        };
        Ok(SynthConfig {
            flows: self.flows(src_mac, dst_mac)?,
            stream_base: self.stream,
            sizes: self.sizes.clone(),
            seed: self.seed,
            rate: self.rate().unwrap_or(Rate::Top),
            count,
            duration_ns,
        })
    }

    /// The synthetic source, for `interface` (or a file when `None`).
    pub fn synth(
        &self,
        interface: Option<&str>,
        warn: &mut dyn FnMut(String),
    ) -> Result<Synth, GenError> {
        let (src, dst) = self.macs(interface, warn)?;
        Synth::new(self.config(src, dst)?)
    }
}

impl Replay {
    /// Checks that the file's frames can be sent on an (Ethernet) interface.
    pub fn check_sendable(&self) -> Result<(), GenError> {
        if self.link() != LinkType::ETHERNET {
            return Err(GenError::Config(format!(
                "{}: only Ethernet captures can be sent on an interface, this one is {}",
                self.path().display(),
                self.link()
            )));
        }
        Ok(())
    }
}

/// The address `n` places after `ip` (wrapping at the end of the address space).
fn nth_address(ip: IpAddr, n: u32) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V4(u32::from(a).wrapping_add(n).into()),
        IpAddr::V6(a) => IpAddr::V6(u128::from(a).wrapping_add(u128::from(n)).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> StreamSpec {
        StreamSpec {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            sport: 65_535,
            dport: 9000,
            src_mac: None,
            dst_mac: None,
            tos: 0x10,
            dscp: None,
            ttl: 64,
            vlan: None,
            tcp: false,
            flows: 2,
            hosts: 1,
            stream: 0,
            sizes: SizeMix::Fixed(60),
            seed: 1,
            pps: None,
            mbps: None,
            top: false,
            count: None,
            duration_s: None,
        }
    }

    #[test]
    fn defaults_fill_in_as_documented() {
        let s = spec();
        let mut warned = Vec::new();
        let (src, dst) = s.macs(None, &mut |w| warned.push(w)).unwrap();
        assert_eq!(src, [2, 0, 0, 0, 0, 1]);
        assert_eq!(dst, [2, 0, 0, 0, 0, 2]);
        assert!(warned.is_empty());
        let c = s.config(src, dst).unwrap();
        assert_eq!(c.count, Some(1000));
        assert_eq!(c.duration_ns, None);
        assert_eq!(c.rate, Rate::Top);
        // Ports wrap: 65535 then 0.
        let ports: Vec<u16> = c.flows.iter().map(|f| f.src_port).collect();
        assert_eq!(ports, [65_535, 0]);
        assert_eq!(c.flows[0].tos, 0x10);
        let c = StreamSpec {
            duration_s: Some(1.5),
            dscp: Some(46),
            vlan: Some("100:5".into()),
            ..s.clone()
        }
        .config(src, dst)
        .unwrap();
        assert_eq!(c.count, None);
        assert_eq!(c.duration_ns, Some(1_500_000_000));
        assert_eq!(c.flows[1].tos, 46 << 2);
        assert_eq!(c.flows[1].vlan, Some((100, 5)));
    }

    #[test]
    fn hosts_cycle_the_source_address_over_the_flows() {
        let m = [0; 6];
        // 5 flows over 2 hosts: addresses src, src+1, src, src+1, src (k mod 2), ports
        // 65535, 0, 1, 2, 3 (counted by hand from the spec's --sport 65535).
        let c = StreamSpec {
            flows: 5,
            hosts: 2,
            src: "10.0.0.255".parse().unwrap(),
            ..spec()
        }
        .config(m, m)
        .unwrap();
        let keys: Vec<(String, u16)> = c
            .flows
            .iter()
            .map(|f| (f.src_ip.to_string(), f.src_port))
            .collect();
        let want = [
            ("10.0.0.255", 65_535),
            ("10.0.1.0", 0),
            ("10.0.0.255", 1),
            ("10.0.1.0", 2),
            ("10.0.0.255", 3),
        ];
        assert_eq!(keys, want.map(|(a, p)| (a.to_string(), p)));
        let v6 = StreamSpec {
            hosts: 3,
            flows: 3,
            src: "2001:db8::ffff".parse().unwrap(),
            dst: "2001:db8::1".parse().unwrap(),
            ..spec()
        }
        .config(m, m)
        .unwrap();
        let last: Vec<String> = v6.flows.iter().map(|f| f.src_ip.to_string()).collect();
        assert_eq!(last, ["2001:db8::ffff", "2001:db8::1:0", "2001:db8::1:1"]);
    }

    #[test]
    fn bad_settings_say_which() {
        let s = spec();
        let m = [0; 6];
        let e = |s: StreamSpec| s.config(m, m).unwrap_err().to_string();
        assert_eq!(
            e(StreamSpec {
                vlan: Some("x".into()),
                ..s.clone()
            }),
            "bad VLAN id 'x': invalid digit found in string"
        );
        assert_eq!(
            e(StreamSpec {
                vlan: Some("5:9z".into()),
                ..s.clone()
            }),
            "bad VLAN priority '9z': invalid digit found in string"
        );
        assert_eq!(
            e(StreamSpec {
                dscp: Some(64),
                ..s.clone()
            }),
            "--dscp must be 0-63"
        );
        assert_eq!(
            e(StreamSpec {
                flows: 0,
                ..s.clone()
            }),
            "--flows must be at least 1"
        );
        let bad_mac = StreamSpec {
            src_mac: Some("02:00".into()),
            ..s
        };
        assert_eq!(
            bad_mac.macs(None, &mut |_| {}).unwrap_err().to_string(),
            "bad MAC address '02:00'"
        );
    }

    #[test]
    fn rates_and_paces_follow_precedence() {
        assert_eq!(rate_of(Some(5.0), None, false), Some(Rate::Pps(5.0)));
        assert_eq!(rate_of(None, Some(2.0), false), Some(Rate::Mbps(2.0)));
        assert_eq!(rate_of(None, None, true), Some(Rate::Top));
        assert_eq!(rate_of(None, None, false), None);
        assert_eq!(
            replay_pace(Some(2.0), Some(Rate::Top)),
            ReplayPace::Recorded { multiplier: 2.0 }
        );
        assert_eq!(
            replay_pace(None, Some(Rate::Top)),
            ReplayPace::Rate(Rate::Top)
        );
        assert_eq!(
            replay_pace(None, None),
            ReplayPace::Recorded { multiplier: 1.0 }
        );
        assert_eq!(parse_tos("0xc0"), Ok(0xc0));
        assert_eq!(parse_tos("12"), Ok(12));
        assert_eq!(
            parse_tos("256"),
            Err("'256' is not a byte (0-255 or 0x00-0xff)".into())
        );
    }
}
