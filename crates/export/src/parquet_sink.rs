//! Parquet files of flow records: one file per interval of packet time (5 minutes by default)
//! and per sensor, in Hive-style partition directories
//! `DIR/date=YYYY-MM-DD/hour=HH/SENSOR-YYYYMMDDTHHMMSSZ.parquet` (the interval's start, UTC).
//!
//! A file is written under a hidden temporary name (`.SENSOR-….parquet.tmp`, which readers
//! globbing `*.parquet` and Hive readers skip), synced, then linked to its final name and the
//! temporary name removed: a reader never sees a half-written file, and a process killed
//! mid-interval leaves only the temporary file. The link never replaces a file: when the name is
//! taken (a second run over the same interval), the file gets `-1`, `-2`… before `.parquet`.
//!
//! A record belongs to the file open when it is exported; the clock is the latest last-packet
//! time of the records, and a file is completed as soon as the clock or the meter's tick passes
//! its interval's end (or a record goes back more than an interval and an hour: captures
//! concatenated out of time order start again). Intervals without records leave no file.
//!
//! Columns (IPFIX names, as the JSON lines; typed, zstd-compressed, dictionary-encoded where it
//! pays): `flowStartNanoseconds`, `flowEndNanoseconds` (timestamp ns UTC, null for a direction
//! without packets), `vlanId` (uint16), `ipVersion` (uint8, 4 or 6), `sourceIPAddress`,
//! `destinationIPAddress` (16-byte fixed: IPv6, or IPv4 mapped as `::ffff:a.b.c.d`),
//! `protocolIdentifier`, `sourceTransportPort`, `destinationTransportPort`, `ipClassOfService`,
//! `packetDeltaCount`, `octetDeltaCount` (int64), `tcpControlBits`, `minimumTTL`, `maximumTTL`,
//! the same eight `reverse…` columns (RFC 5103), `flowEndReason` (the IANA name), `tag` (null
//! when untagged) and `sensor`. Row groups hold up to [`ROW_GROUP_ROWS`] records.

use std::fs::File;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, FixedLenByteArray, FixedLenByteArrayType};
use parquet::data_type::{Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::Type;
use weir_flows::{Direction, FlowRecord};

use crate::sink::{ExportStats, FlowSink};
use crate::text::end_reason_name;
use crate::ExportError;

/// Records per row group (DuckDB scans a row group per thread; its own default is 122 880).
pub const ROW_GROUP_ROWS: usize = 262_144;

/// The default interval of a file: 5 minutes.
pub const DEFAULT_INTERVAL_NS: u64 = 300_000_000_000;

/// The file schema (see the module documentation).
const SCHEMA: &str = "message weir_flow {
  OPTIONAL INT64 flowStartNanoseconds (TIMESTAMP(NANOS,true));
  OPTIONAL INT64 flowEndNanoseconds (TIMESTAMP(NANOS,true));
  REQUIRED INT32 vlanId (INTEGER(16,false));
  REQUIRED INT32 ipVersion (INTEGER(8,false));
  REQUIRED FIXED_LEN_BYTE_ARRAY (16) sourceIPAddress;
  REQUIRED FIXED_LEN_BYTE_ARRAY (16) destinationIPAddress;
  REQUIRED INT32 protocolIdentifier (INTEGER(8,false));
  REQUIRED INT32 sourceTransportPort (INTEGER(16,false));
  REQUIRED INT32 destinationTransportPort (INTEGER(16,false));
  REQUIRED INT32 ipClassOfService (INTEGER(8,false));
  REQUIRED INT64 packetDeltaCount;
  REQUIRED INT64 octetDeltaCount;
  REQUIRED INT32 tcpControlBits (INTEGER(8,false));
  REQUIRED INT32 minimumTTL (INTEGER(8,false));
  REQUIRED INT32 maximumTTL (INTEGER(8,false));
  OPTIONAL INT64 reverseFlowStartNanoseconds (TIMESTAMP(NANOS,true));
  OPTIONAL INT64 reverseFlowEndNanoseconds (TIMESTAMP(NANOS,true));
  REQUIRED INT64 reversePacketDeltaCount;
  REQUIRED INT64 reverseOctetDeltaCount;
  REQUIRED INT32 reverseTcpControlBits (INTEGER(8,false));
  REQUIRED INT32 reverseMinimumTTL (INTEGER(8,false));
  REQUIRED INT32 reverseMaximumTTL (INTEGER(8,false));
  REQUIRED BYTE_ARRAY flowEndReason (STRING);
  OPTIONAL BYTE_ARRAY tag (STRING);
  REQUIRED BYTE_ARRAY sensor (STRING);
}";

/// Where and how a run writes Parquet files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetOutput {
    /// The top directory (the partition directories go below it; created when missing).
    pub dir: PathBuf,
    /// Packet time each file covers, in ns (at least 1 s).
    pub interval_ns: u64,
    /// The sensor's name: the files' name prefix and the `sensor` column.
    pub sensor: String,
}

/// The file being written.
struct Open {
    /// Temporary path.
    tmp: PathBuf,
    /// The partition directory and the final name's stem (without `.parquet`).
    dir: PathBuf,
    stem: String,
    /// End of its interval (exclusive), ns.
    end_ns: u64,
    /// A second handle on the file, to sync it after the writer closes.
    file: File,
    writer: SerializedFileWriter<File>,
}

/// The Parquet sink (see the module documentation).
pub(crate) struct ParquetSink {
    out: ParquetOutput,
    schema: Arc<Type>,
    props: Arc<WriterProperties>,
    /// Records of the row group being gathered.
    rows: Vec<FlowRecord>,
    open: Option<Open>,
    /// The clock: the latest packet time seen.
    now_ns: u64,
    stats: ExportStats,
}

/// A sensor name usable in a file name: not empty, no `/`, no NUL, not starting with `.`.
fn check_sensor(name: &str) -> Result<(), ExportError> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\0']) || name.len() > 200 {
        return Err(ExportError::Unsupported(format!(
            "sensor name {name:?} cannot name a file (give 1 to 200 characters, no `/`, not \
             starting with `.`)"
        )));
    }
    Ok(())
}

impl ParquetSink {
    /// Checks the output and creates its top directory; files are created as records come.
    pub(crate) fn open(out: &ParquetOutput) -> Result<Self, ExportError> {
        check_sensor(&out.sensor)?;
        if out.interval_ns < 1_000_000_000 {
            return Err(ExportError::Unsupported(
                "a Parquet interval shorter than 1 s".into(),
            ));
        }
        std::fs::create_dir_all(&out.dir).map_err(|source| ExportError::Create {
            path: out.dir.clone(),
            source,
        })?;
        let schema = Arc::new(parse_message_type(SCHEMA).map_err(ExportError::Parquet)?);
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
                .set_created_by(format!("weir {}", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        Ok(ParquetSink {
            out: out.clone(),
            schema,
            props,
            rows: Vec::new(),
            open: None,
            now_ns: 0,
            stats: ExportStats::default(),
        })
    }

    /// How far back a record's time may go before it is taken as a new capture, and how far
    /// past the open file's end a tick may be and still be this capture's time: an interval
    /// and an hour.
    fn slack(&self) -> u64 {
        self.out.interval_ns.saturating_add(3_600_000_000_000)
    }

    /// Advances the clock to a record's time; completes the open file when the clock has left
    /// its interval. A record more than [`slack`](Self::slack) before the clock (captures
    /// concatenated out of time order) completes the open file and sets the clock back.
    fn advance(&mut self, t: u64) -> Result<(), ExportError> {
        if t.saturating_add(self.slack()) < self.now_ns {
            self.complete()?;
            self.now_ns = t;
        }
        self.now_ns = self.now_ns.max(t);
        if self.open.as_ref().is_some_and(|o| self.now_ns >= o.end_ns) {
            self.complete()?;
        }
        Ok(())
    }

    /// Opens the file of the clock's interval.
    fn create(&mut self) -> Result<(), ExportError> {
        let start = self.now_ns - self.now_ns % self.out.interval_ns;
        let u = weir_packet::Utc::from_ns(start);
        let dir = self.out.dir.join(format!(
            "date={:04}-{:02}-{:02}/hour={:02}",
            u.year, u.month, u.day, u.hour
        ));
        let stem = format!(
            "{}-{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.out.sensor, u.year, u.month, u.day, u.hour, u.minute, u.second
        );
        let tmp = dir.join(format!(".{stem}.parquet.tmp"));
        let created = std::fs::create_dir_all(&dir)
            .and_then(|()| File::create(&tmp))
            .and_then(|f| Ok((f.try_clone()?, f)));
        let (file, w) = created.map_err(|source| ExportError::Create {
            path: tmp.clone(),
            source,
        })?;
        let writer = SerializedFileWriter::new(w, self.schema.clone(), self.props.clone())
            .map_err(ExportError::Parquet)?;
        self.open = Some(Open {
            tmp,
            dir,
            stem,
            end_ns: start.saturating_add(self.out.interval_ns),
            file,
            writer,
        });
        Ok(())
    }

    /// Writes the gathered rows as a row group of the open file.
    fn flush_rows(&mut self) -> Result<(), ExportError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if self.rows.is_empty() {
            return Ok(());
        }
        write_row_group(&mut open.writer, &self.rows, &self.out.sensor)
            .map_err(ExportError::Parquet)?;
        self.rows.clear();
        Ok(())
    }

    /// Finishes the open file: last row group, footer, sync, then its final name.
    fn complete(&mut self) -> Result<(), ExportError> {
        self.flush_rows()?;
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        open.writer.close().map_err(ExportError::Parquet)?;
        open.file.sync_all()?;
        let size = open.file.metadata()?.len();
        let mut n = 0u32;
        loop {
            let name = if n == 0 {
                format!("{}.parquet", open.stem)
            } else {
                format!("{}-{n}.parquet", open.stem)
            };
            let path = open.dir.join(name);
            match std::fs::hard_link(&open.tmp, &path) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => n += 1,
                Err(source) => return Err(ExportError::Create { path, source }),
            }
        }
        std::fs::remove_file(&open.tmp)?;
        File::open(&open.dir)?.sync_all()?;
        self.stats.datagrams += 1;
        self.stats.bytes += size;
        Ok(())
    }
}

impl FlowSink for ParquetSink {
    fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        self.advance(rec.forward.last_ns.max(rec.reverse.last_ns))?;
        if self.open.is_none() {
            self.create()?;
        }
        self.rows.push(*rec);
        self.stats.records += 1;
        if self.rows.len() >= ROW_GROUP_ROWS {
            self.flush_rows()?;
        }
        Ok(())
    }

    /// Completes the open file when `now_ns` is past its end. The meter's tick never goes
    /// back (it is the latest time of the whole run), so a tick more than
    /// [`slack`](Self::slack) past the file's end belongs to another, later capture than the
    /// records being written, and is ignored.
    fn tick(&mut self, now_ns: u64) -> Result<(), ExportError> {
        let past = |o: &Open| now_ns >= o.end_ns && now_ns - o.end_ns < self.slack();
        if self.open.as_ref().is_some_and(past) {
            self.complete()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ExportStats, ExportError> {
        self.complete()?;
        Ok(self.stats)
    }
}

/// An address as 16 bytes (IPv4 mapped) and its IP version.
fn address(a: IpAddr) -> (FixedLenByteArray, i32) {
    match a {
        IpAddr::V4(v4) => (v4.to_ipv6_mapped().octets().to_vec().into(), 4),
        IpAddr::V6(v6) => (v6.octets().to_vec().into(), 6),
    }
}

/// Nanoseconds as Parquet's signed timestamp (past year 2262: the largest).
fn ts(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// A timestamp column of one direction: values of the rows with packets, and definition levels.
fn times(
    rows: &[FlowRecord],
    dir: fn(&FlowRecord) -> &Direction,
    last: bool,
) -> (Vec<i64>, Vec<i16>) {
    let mut v = Vec::with_capacity(rows.len());
    let mut def = Vec::with_capacity(rows.len());
    for r in rows {
        let d = dir(r);
        if d.packets == 0 {
            def.push(0);
        } else {
            def.push(1);
            v.push(ts(if last { d.last_ns } else { d.first_ns }));
        }
    }
    (v, def)
}

fn i32s(rows: &[FlowRecord], f: impl Fn(&FlowRecord) -> i32) -> Vec<i32> {
    rows.iter().map(f).collect()
}

fn i64s(rows: &[FlowRecord], f: impl Fn(&FlowRecord) -> u64) -> Vec<i64> {
    rows.iter().map(|r| ts(f(r))).collect()
}

/// Writes `rows` as one row group, column by column in schema order.
fn write_row_group(
    w: &mut SerializedFileWriter<File>,
    rows: &[FlowRecord],
    sensor: &str,
) -> parquet::errors::Result<()> {
    let mut rg = w.next_row_group()?;
    let mut i = 0;
    while let Some(mut col) = rg.next_column()? {
        write_column(&mut col, i, rows, sensor)?;
        col.close()?;
        i += 1;
    }
    rg.close()?;
    Ok(())
}

/// Writes column `i` of the schema.
fn write_column(
    col: &mut SerializedColumnWriter<'_>,
    i: usize,
    rows: &[FlowRecord],
    sensor: &str,
) -> parquet::errors::Result<()> {
    let int32 = |col: &mut SerializedColumnWriter<'_>, v: Vec<i32>| {
        col.typed::<Int32Type>()
            .write_batch(&v, None, None)
            .map(drop)
    };
    let int64 = |col: &mut SerializedColumnWriter<'_>, v: Vec<i64>| {
        col.typed::<Int64Type>()
            .write_batch(&v, None, None)
            .map(drop)
    };
    let time = |col: &mut SerializedColumnWriter<'_>, (v, def): (Vec<i64>, Vec<i16>)| {
        col.typed::<Int64Type>()
            .write_batch(&v, Some(&def), None)
            .map(drop)
    };
    let addr = |col: &mut SerializedColumnWriter<'_>, src: bool| {
        let v: Vec<FixedLenByteArray> = rows
            .iter()
            .map(|r| address(if src { r.key.src } else { r.key.dst }).0)
            .collect();
        col.typed::<FixedLenByteArrayType>()
            .write_batch(&v, None, None)
            .map(drop)
    };
    let dir_cols = |col: &mut SerializedColumnWriter<'_>,
                    j: usize,
                    d: fn(&FlowRecord) -> &Direction| {
        match j {
            0 => time(col, times(rows, d, false)),
            1 => time(col, times(rows, d, true)),
            2 => int64(col, i64s(rows, |r| d(r).packets)),
            3 => int64(col, i64s(rows, |r| d(r).bytes)),
            4 => int32(col, i32s(rows, |r| d(r).tcp_flags.into())),
            5 => int32(col, i32s(rows, |r| d(r).min_ttl.into())),
            _ => int32(col, i32s(rows, |r| d(r).max_ttl.into())),
        }
    };
    fn fwd(r: &FlowRecord) -> &Direction {
        &r.forward
    }
    fn rev(r: &FlowRecord) -> &Direction {
        &r.reverse
    }
    match i {
        0 | 1 => dir_cols(col, i, fwd),
        2 => int32(col, i32s(rows, |r| r.key.vlan.into())),
        3 => int32(col, i32s(rows, |r| address(r.key.src).1)),
        4 => addr(col, true),
        5 => addr(col, false),
        6 => int32(col, i32s(rows, |r| r.key.proto.into())),
        7 => int32(col, i32s(rows, |r| r.key.src_port.into())),
        8 => int32(col, i32s(rows, |r| r.key.dst_port.into())),
        9 => int32(col, i32s(rows, |r| r.key.tos.into())),
        10..=14 => dir_cols(col, i - 8, fwd),
        15..=21 => dir_cols(col, i - 15, rev),
        22 => {
            let v: Vec<ByteArray> = rows
                .iter()
                .map(|r| ByteArray::from(end_reason_name(r.end_reason)))
                .collect();
            col.typed::<ByteArrayType>()
                .write_batch(&v, None, None)
                .map(drop)
        }
        23 => {
            let mut v = Vec::new();
            let def: Vec<i16> = rows
                .iter()
                .map(|r| match r.tag {
                    Some(t) => {
                        v.push(ByteArray::from(t.to_string().into_bytes()));
                        1
                    }
                    None => 0,
                })
                .collect();
            col.typed::<ByteArrayType>()
                .write_batch(&v, Some(&def), None)
                .map(drop)
        }
        _ => {
            let v = vec![ByteArray::from(sensor); rows.len()];
            col.typed::<ByteArrayType>()
                .write_batch(&v, None, None)
                .map(drop)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::path::Path;
    use weir_flows::{EndReason, FlowKey};

    const T0: u64 = 1_795_256_430_000_000_000; // 2026-11-21T10:20:30Z

    fn rec(at: u64) -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                vlan: 7,
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                dst: "2001:db8::2".parse().unwrap(),
                proto: 6,
                src_port: 1234,
                dst_port: 80,
                tos: 0,
            },
            forward: Direction {
                packets: 2,
                bytes: 120,
                first_ns: at - 5,
                last_ns: at,
                tcp_flags: 0x12,
                min_ttl: 60,
                max_ttl: 64,
            },
            reverse: Direction::default(),
            end_reason: EndReason::EndOfFlow,
            tag: None,
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn one_file_per_interval_renamed_when_complete() {
        let dir = std::env::temp_dir().join(format!("weir-parquet-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = ParquetOutput {
            dir: dir.clone(),
            interval_ns: DEFAULT_INTERVAL_NS,
            sensor: "s1".into(),
        };
        let mut s = ParquetSink::open(&out).unwrap();
        s.export(&rec(T0)).unwrap();
        s.export(&rec(T0 + 1)).unwrap();
        // mid-interval: only the temporary file
        assert_eq!(
            files(&dir),
            ["date=2026-11-21/hour=10/.s1-20261121T102000Z.parquet.tmp"]
        );
        // 10:25:00 ends the first interval
        s.tick(T0 + 270_000_000_000).unwrap();
        assert_eq!(
            files(&dir),
            ["date=2026-11-21/hour=10/s1-20261121T102000Z.parquet"]
        );
        s.export(&rec(T0 + 3_600_000_000_000)).unwrap();
        let st = s.finish().unwrap();
        assert_eq!((st.records, st.datagrams), (3, 2));
        assert_eq!(
            files(&dir),
            [
                "date=2026-11-21/hour=10/s1-20261121T102000Z.parquet",
                "date=2026-11-21/hour=11/s1-20261121T112000Z.parquet"
            ]
        );
        // a second run over the same interval does not replace the first file
        let mut s = ParquetSink::open(&out).unwrap();
        s.export(&rec(T0)).unwrap();
        s.finish().unwrap();
        assert!(
            files(&dir).contains(&"date=2026-11-21/hour=10/s1-20261121T102000Z-1.parquet".into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_clock_going_back_starts_a_new_file() {
        let dir = std::env::temp_dir().join(format!("weir-parquet-back-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = ParquetOutput {
            dir: dir.clone(),
            interval_ns: DEFAULT_INTERVAL_NS,
            sensor: "s".into(),
        };
        let mut s = ParquetSink::open(&out).unwrap();
        s.export(&rec(T0)).unwrap();
        // a record 61 minutes earlier stays in the open file (late, not a restart)...
        s.export(&rec(T0 - 3_660_000_000_000)).unwrap();
        // ...a day earlier is a second capture: the first file is complete
        s.export(&rec(T0 - 86_400_000_000_000)).unwrap();
        // the meter's tick stays at the latest time of the run: a day past this file, ignored
        s.tick(T0).unwrap();
        assert_eq!(
            files(&dir),
            [
                "date=2026-11-20/hour=10/.s-20261120T102000Z.parquet.tmp",
                "date=2026-11-21/hour=10/s-20261121T102000Z.parquet"
            ]
        );
        assert_eq!(s.finish().unwrap().records, 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_sensor_names_and_intervals_are_refused() {
        for name in ["", ".x", "a/b", "a\0b"] {
            let out = ParquetOutput {
                dir: std::env::temp_dir(),
                interval_ns: DEFAULT_INTERVAL_NS,
                sensor: name.into(),
            };
            assert!(matches!(
                ParquetSink::open(&out),
                Err(ExportError::Unsupported(_))
            ));
        }
        let out = ParquetOutput {
            dir: std::env::temp_dir(),
            interval_ns: 999_999_999,
            sensor: "s".into(),
        };
        assert!(matches!(
            ParquetSink::open(&out),
            Err(ExportError::Unsupported(_))
        ));
    }
}
