//! The datagram builder shared by NetFlow v9 and IPFIX: a header, an optional template
//! (flow)set, then data (flow)sets, each set holding consecutive records of one template.
//!
//! Templates go at the start of a datagram when they are due: in the first datagram, then every
//! `refresh_packets` datagrams (0 = never by count) and whenever `refresh_ns` of packet time has
//! passed since they were last sent (0 = never by time). The decision is taken when a datagram is
//! opened. A set is padded with zeros to a multiple of `PAD` bytes; the datagram never exceeds
//! the MTU (the maximum UDP payload).

use weir_flows::FlowRecord;

use crate::clock::{span_ms, Base, Clock};
use crate::packer::{biflow, uniflows, Added, Datagram, Packer, View};
use crate::template::Template;
use crate::ExportError;

/// What a format contributes: its header, its template set id and its set padding.
pub(crate) trait SetFormat: Send {
    /// Header length.
    const HEADER_LEN: usize;
    /// Set id of template sets (v9: 0, IPFIX: 2).
    const TEMPLATE_SET_ID: u16;
    /// Sets are padded to a multiple of this.
    const PAD: usize;
    /// Whether records carry times relative to the header's sys_uptime (NetFlow v9), so each
    /// datagram needs a [`Base`]; IPFIX times are absolute.
    const UPTIME: bool;
    /// Fills the header of a finished datagram (`buf` holds the whole datagram) and advances
    /// the format's sequence counter.
    fn write_header(&mut self, buf: &mut [u8], counts: Counts, clock: &Clock);
}

/// Records in a finished datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Template records.
    pub templates: u16,
    /// Data records.
    pub data: u16,
}

/// Template refresh policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refresh {
    /// Resend templates every this many datagrams (0: never by count).
    pub packets: u32,
    /// Resend templates when this much packet time has passed (0: never by time).
    pub ns: u64,
}

/// A v9 / IPFIX encoder.
#[derive(Debug)]
pub(crate) struct SetPacker<F: SetFormat> {
    format: F,
    /// `[IPv4, IPv6]` one-way templates, then (biflow) `[IPv4, IPv6]` bidirectional ones.
    templates: Vec<Template>,
    biflow: bool,
    mtu: usize,
    refresh: Refresh,
    buf: Vec<u8>,
    /// Template id and start offset of the open data set.
    set: Option<(u16, usize)>,
    counts: Counts,
    /// Datagrams sent since the templates were last sent, and when (ns); None before the first.
    since_templates: Option<(u32, u64)>,
    /// Time base of the open datagram (formats with `UPTIME` only).
    base: Option<Base>,
    /// Records whose times could not be expressed (a flow longer than 49.7 days).
    clamped: u64,
}

impl<F: SetFormat> SetPacker<F> {
    /// An encoder; fails when `mtu` cannot hold a header, the templates and one record of each.
    pub(crate) fn new(
        format: F,
        templates: Vec<Template>,
        biflow: bool,
        mtu: usize,
        refresh: Refresh,
    ) -> Result<Self, ExportError> {
        let tset: usize = 4 + templates.iter().map(Template::template_len).sum::<usize>();
        let rec = templates
            .iter()
            .map(Template::record_len)
            .max()
            .unwrap_or(0);
        let needed = F::HEADER_LEN + tset + (4 + rec).next_multiple_of(F::PAD);
        if mtu < needed || mtu > 65_507 {
            return Err(ExportError::MtuTooSmall { mtu, needed });
        }
        Ok(SetPacker {
            format,
            templates,
            biflow,
            mtu,
            refresh,
            buf: Vec::with_capacity(mtu),
            set: None,
            counts: Counts {
                templates: 0,
                data: 0,
            },
            since_templates: None,
            base: None,
            clamped: 0,
        })
    }

    fn templates_due(&self, now_ns: u64) -> bool {
        match self.since_templates {
            None => true,
            Some((n, at)) => {
                (self.refresh.packets > 0 && n >= self.refresh.packets)
                    || (self.refresh.ns > 0 && now_ns.saturating_sub(at) >= self.refresh.ns)
            }
        }
    }

    fn open(&mut self, clock: &Clock) {
        self.buf.clear();
        self.buf.resize(F::HEADER_LEN, 0);
        if self.templates_due(clock.now_ns()) {
            let start = self.buf.len();
            self.buf
                .extend_from_slice(&F::TEMPLATE_SET_ID.to_be_bytes());
            self.buf.extend_from_slice(&[0, 0]);
            for t in &self.templates {
                t.write_template(&mut self.buf);
            }
            self.pad_and_close(start);
            self.counts.templates = self.templates.len() as u16;
            self.since_templates = Some((0, clock.now_ns()));
        }
    }

    /// Pads the set starting at `start` and writes its length.
    fn pad_and_close(&mut self, start: usize) {
        let end = start + (self.buf.len() - start).next_multiple_of(F::PAD);
        self.buf.resize(end, 0);
        let len = (end - start) as u16;
        self.buf[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn add_view(&mut self, view: &View<'_>, clock: &Clock, ready: &mut Vec<Datagram>) {
        let two_way = self.templates.len() == 4 && view.rev.packets > 0;
        let t = usize::from(view.key.src.is_ipv6()) + if two_way { 2 } else { 0 };
        let id = self.templates[t].id;
        let rec_len = self.templates[t].record_len();
        let span = F::UPTIME.then(|| span_ms(view.fwd)).flatten();
        if F::UPTIME && !self.buf.is_empty() && !self.base.as_mut().is_some_and(|b| b.admit(span)) {
            ready.extend(self.flush(clock));
        }
        loop {
            if self.buf.is_empty() {
                self.open(clock);
                if F::UPTIME {
                    let (base, fits) = Base::open(clock, span);
                    self.clamped += u64::from(!fits);
                    self.base = Some(base);
                }
            }
            let (set_start, extra) = match self.set {
                Some((sid, start)) if sid == id => (start, 0),
                _ => (self.buf.len(), 4),
            };
            let end = self.buf.len() + extra + rec_len;
            let padded = set_start + (end - set_start).next_multiple_of(F::PAD);
            if padded <= self.mtu {
                break;
            }
            // `new` checked that one record fits in a fresh datagram.
            debug_assert!(self.counts.data > 0);
            ready.extend(self.flush(clock));
        }
        if !matches!(self.set, Some((sid, _)) if sid == id) {
            if let Some((_, start)) = self.set.take() {
                self.pad_and_close(start);
            }
            self.set = Some((id, self.buf.len()));
            self.buf.extend_from_slice(&id.to_be_bytes());
            self.buf.extend_from_slice(&[0, 0]);
        }
        let at = self.base.as_ref().map_or(*clock, |b| b.records(clock));
        self.templates[t].write_record(&mut self.buf, view, &at);
        self.counts.data += 1;
    }
}

impl<F: SetFormat> Packer for SetPacker<F> {
    fn add(&mut self, rec: &FlowRecord, clock: &Clock, ready: &mut Vec<Datagram>) -> Added {
        if self.biflow {
            self.add_view(&biflow(rec), clock, ready);
        } else {
            for v in uniflows(rec) {
                self.add_view(&v, clock, ready);
            }
        }
        Added::Encoded
    }

    fn is_pending(&self) -> bool {
        !self.buf.is_empty()
    }

    fn clamped(&self) -> u64 {
        self.clamped
    }

    fn carries_tags(&self) -> bool {
        self.templates.iter().any(|t| {
            t.fields
                .iter()
                .any(|f| f.value == crate::template::Value::Tag)
        })
    }

    fn flush(&mut self, clock: &Clock) -> Option<Datagram> {
        if self.buf.is_empty() {
            return None;
        }
        if let Some((_, start)) = self.set.take() {
            self.pad_and_close(start);
        }
        let at = self.base.take().map_or(*clock, |b| b.header(clock, true));
        self.format.write_header(&mut self.buf, self.counts, &at);
        if let Some((n, _)) = &mut self.since_templates {
            *n += 1;
        }
        let records = u64::from(self.counts.data);
        self.counts = Counts {
            templates: 0,
            data: 0,
        };
        Some(Datagram {
            bytes: std::mem::replace(&mut self.buf, Vec::with_capacity(self.mtu)),
            records,
        })
    }
}
