//! Parquet files of flow records: one file per interval of packet time (5 minutes by default)
//! and per sensor, in Hive-style partition directories
//! `DIR/date=YYYY-MM-DD/hour=HH/SENSOR-YYYYMMDDTHHMMSSZ.parquet` (the interval's start, UTC).
//!
//! A file is written under a hidden temporary name (`.SENSOR-….parquet.tmp`, which readers
//! globbing `*.parquet` and Hive readers skip), closed, then linked to its final name and the
//! temporary name removed: a reader never sees a half-written file, and a process killed
//! mid-interval leaves only the temporary file. The link never replaces a file: when the name is
//! taken (a second run over the same interval), the file gets `-1`, `-2`… before `.parquet`.
//!
//! Durability ([`ParquetOutput::sync`]): a live capture cannot be run again, so there each file
//! is fsynced before its link and its directory after it, and a machine crash (power loss,
//! kernel panic) leaves under a final name only complete files. A run over capture files does
//! not fsync (one file and one directory fsync per file made such a run 2–3 times slower): a
//! killed process still leaves no half file under a final name (the data is in the page cache
//! when the link is made), but after a machine crash a file under its final name may be empty
//! or short; such an offline run is repeatable, so delete its output directory and run it
//! again.
//!
//! A record belongs to the file open when it is exported; the clock is the latest last-packet
//! time of the records, and a file is completed as soon as the clock or the meter's tick passes
//! its interval's end (or a record goes back more than an interval and an hour: captures
//! concatenated out of time order start again). Intervals without records leave no file.
//!
//! Columns (IPFIX names, as the JSON lines; typed; the addresses zstd-compressed, every integer
//! column (times, ports, counters, VLAN, IP version, protocol, ToS, TCP flags, TTLs)
//! delta-encoded (`DELTA_BINARY_PACKED`) and not compressed, the strings (`flowEndReason`,
//! `tag`, `sensor`) dictionary-encoded and not compressed: see [`DELTA_COLUMNS`] for why; min/max
//! statistics per column chunk): `flowStartNanoseconds`, `flowEndNanoseconds` (timestamp ns UTC, null for a direction
//! without packets), `vlanId` (uint16), `ipVersion` (uint8, 4 or 6), `sourceIPAddress`,
//! `destinationIPAddress` (16-byte fixed: IPv6, or IPv4 mapped as `::ffff:a.b.c.d`),
//! `protocolIdentifier`, `sourceTransportPort`, `destinationTransportPort`, `ipClassOfService`,
//! `packetDeltaCount`, `octetDeltaCount` (int64), `tcpControlBits`, `minimumTTL`, `maximumTTL`,
//! the same eight `reverse…` columns (RFC 5103), `flowEndReason` (the IANA name), `tag` (null
//! when untagged) and `sensor`. Row groups hold up to [`ROW_GROUP_ROWS`] records.
//!
//! Cost per file (a 5-minute file of a small sensor holds a few hundred records, so nearly all
//! of the sink's work is per file): the schema, the writer properties, the column buffers and
//! the file's write buffer ([`Spool`]) are made once and reused from file to file; what the
//! parquet crate makes per file (the file writer, a column writer and its encoder per column,
//! a zstd context per address column chunk, the footer) cannot be handed to it again; no
//! offset index is written (nothing reads it without page statistics).

use std::fs::File;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, FixedLenByteArray, FixedLenByteArrayType};
use parquet::data_type::{Int32Type, Int64Type};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;
use parquet::schema::types::Type;
use weir_flows::{Direction, EndReason, FlowRecord};

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

/// The string columns of few distinct values: dictionary-encoded, not compressed.
const DICTIONARY_COLUMNS: &[&str] = &["flowEndReason", "tag", "sensor"];

/// The integer columns of many distinct values (times, ports, counters): delta-encoded
/// (`DELTA_BINARY_PACKED`: each block's deltas from their minimum, bit-packed) and not
/// compressed. The parquet crate makes a zstd compressor and a decompressor for every
/// compressed column chunk, and each asks the CPU its features (`cpuid`, three times): on a
/// virtual machine every `cpuid` traps to the hypervisor (≈ 10 µs on the 2-vCPU bench VMs), so
/// with files of a few hundred records (5 minutes of a small sensor) making compressors cost
/// more than compressing. Delta encoding needs no compressor and packs these columns about as
/// small as zstd did (times within a file and counters are small numbers apart); only the two
/// address columns stay zstd-compressed (bench/README.md, session 18). The small integers
/// (VLAN, IP version, protocol, ToS, TCP flags, TTLs) are delta-encoded too, not
/// dictionary-encoded: a dictionary encoder hashes every value and writes one more page per
/// column chunk, where delta-packing 8-bit values is a subtraction and a few bits each
/// (bench/README.md, session 19).
const DELTA_COLUMNS: &[&str] = &[
    "vlanId",
    "ipVersion",
    "protocolIdentifier",
    "ipClassOfService",
    "tcpControlBits",
    "minimumTTL",
    "maximumTTL",
    "reverseTcpControlBits",
    "reverseMinimumTTL",
    "reverseMaximumTTL",
    "flowStartNanoseconds",
    "flowEndNanoseconds",
    "sourceTransportPort",
    "destinationTransportPort",
    "packetDeltaCount",
    "octetDeltaCount",
    "reverseFlowStartNanoseconds",
    "reverseFlowEndNanoseconds",
    "reversePacketDeltaCount",
    "reverseOctetDeltaCount",
];

/// Where and how a run writes Parquet files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetOutput {
    /// The top directory (the partition directories go below it; created when missing).
    pub dir: PathBuf,
    /// Packet time each file covers, in ns (at least 1 s).
    pub interval_ns: u64,
    /// The sensor's name: the files' name prefix and the `sensor` column.
    pub sensor: String,
    /// Fsync each file before its final name and its directory after (live capture: a
    /// machine crash must not leave a short file under a final name). Off for runs over
    /// capture files, which can be run again (see the module documentation).
    pub sync: bool,
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
    writer: SerializedFileWriter<Spool>,
}

/// How many bytes a [`Spool`] gathers before it writes them to its file.
const SPOOL_BYTES: usize = 1 << 20;

/// A file written through a buffer the sink keeps from file to file: a file of a few hundred
/// records (a 5-minute file of a small sensor, ≈ 14 kB) is one `write` when it is complete,
/// not one per 8 kB the parquet writer's own buffer fills, and the buffer is not allocated
/// again for every file; a large file is written [`SPOOL_BYTES`] at a time.
struct Spool {
    file: File,
    buf: Vec<u8>,
    /// Bytes written to the file so far.
    written: u64,
}

impl Spool {
    /// Writes what is gathered to the file.
    fn drain(&mut self) -> std::io::Result<()> {
        use std::io::Write as _;
        self.file.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

impl std::io::Write for Spool {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= SPOOL_BYTES {
            self.drain()?;
        }
        Ok(b.len())
    }

    /// Nothing: the rest is written when the file is complete ([`ParquetSink::complete`]).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The Parquet sink (see the module documentation).
pub(crate) struct ParquetSink {
    out: ParquetOutput,
    schema: Arc<Type>,
    props: Arc<WriterProperties>,
    /// Records of the row group being gathered.
    rows: Vec<FlowRecord>,
    /// Column buffers, reused from column to column and row group to row group.
    cols: Columns,
    /// The last file's [`Spool`] buffer, for the next file.
    spare: Vec<u8>,
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
        // An existing file (`/dev/null`, a capture) would otherwise say "File exists"
        if out.dir.exists() && !out.dir.is_dir() {
            return Err(ExportError::Create {
                path: out.dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    "not a directory (--parquet takes the directory the files go into)",
                ),
            });
        }
        std::fs::create_dir_all(&out.dir).map_err(|source| ExportError::Create {
            path: out.dir.clone(),
            source,
        })?;
        let temp_removed = remove_stale_temps(&out.dir, &out.sensor)?;
        let schema = Arc::new(parse_message_type(SCHEMA).map_err(ExportError::Parquet)?);
        // a file holds few records (≈ 400 in 5 minutes of a small sensor): per column chunk,
        // a dictionary page costs more than it saves on addresses, times and counters (zstd
        // compresses the addresses' plain pages, the others are delta-encoded); statistics per
        // column chunk (row group pruning), not per page
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            // no offset index: it locates pages for page-level skipping, which needs page
            // statistics (a column index) weir does not write; per file it was 25 more
            // structures to build and serialize into the footer
            .set_offset_index_disabled(true)
            .set_created_by(format!("weir {}", env!("CARGO_PKG_VERSION")));
        // the string columns of few distinct values are dictionary-encoded (their pages: run
        // lengths of small indices) and not compressed: the parquet crate makes a zstd
        // context per compressed column chunk, a quarter of the sink's time with files of a
        // few hundred records, for a few bytes saved on these
        for col in DICTIONARY_COLUMNS {
            props = props
                .set_column_dictionary_enabled(ColumnPath::from(*col), true)
                .set_column_compression(ColumnPath::from(*col), Compression::UNCOMPRESSED);
        }
        for col in DELTA_COLUMNS {
            props = props
                .set_column_encoding(ColumnPath::from(*col), Encoding::DELTA_BINARY_PACKED)
                .set_column_compression(ColumnPath::from(*col), Compression::UNCOMPRESSED);
        }
        let props = Arc::new(props.build());
        Ok(ParquetSink {
            out: out.clone(),
            schema,
            props,
            rows: Vec::new(),
            cols: Columns::default(),
            spare: Vec::new(),
            open: None,
            now_ns: 0,
            stats: ExportStats {
                temp_removed,
                ..ExportStats::default()
            },
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
        let created = std::fs::create_dir_all(&dir).and_then(|()| File::create(&tmp));
        let file = created.map_err(|source| ExportError::Create {
            path: tmp.clone(),
            source,
        })?;
        let spool = Spool {
            file,
            buf: std::mem::take(&mut self.spare),
            written: 0,
        };
        let writer = SerializedFileWriter::new(spool, self.schema.clone(), self.props.clone())
            .map_err(ExportError::Parquet)?;
        self.open = Some(Open {
            tmp,
            dir,
            stem,
            end_ns: start.saturating_add(self.out.interval_ns),
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
        self.cols
            .write_row_group(&mut open.writer, &self.rows, &self.out.sensor)
            .map_err(ExportError::Parquet)?;
        self.rows.clear();
        Ok(())
    }

    /// Finishes the open file: last row group, footer, sync (when [`ParquetOutput::sync`]),
    /// then its final name.
    fn complete(&mut self) -> Result<(), ExportError> {
        self.flush_rows()?;
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let mut spool = open.writer.into_inner().map_err(ExportError::Parquet)?;
        spool.drain()?;
        if self.out.sync {
            spool.file.sync_all()?;
        }
        let size = spool.written;
        self.spare = std::mem::take(&mut spool.buf);
        drop(spool);
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
        if self.out.sync {
            File::open(&open.dir)?.sync_all()?;
        }
        self.stats.files += 1;
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

    fn stats(&self) -> ExportStats {
        self.stats
    }
}

/// Removes the hidden temporary files (`DIR/date=*/hour=*/.SENSOR-*.parquet.tmp`) of this
/// sensor that a killed earlier run left, and returns how many. Another sensor's are left
/// alone (another process may be writing them); one sensor written by two processes at once
/// is not supported (their files of one interval would share a temporary name).
fn remove_stale_temps(dir: &std::path::Path, sensor: &str) -> Result<u64, ExportError> {
    let prefix = format!(".{sensor}-");
    let subdirs = |d: &std::path::Path, part: &str| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(part))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    };
    let mut removed = 0;
    for date in subdirs(dir, "date=") {
        for hour in subdirs(&date, "hour=") {
            for e in std::fs::read_dir(&hour).into_iter().flatten().flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(&prefix)
                    && name.ends_with(".parquet.tmp")
                    && e.file_type().is_ok_and(|t| t.is_file())
                {
                    std::fs::remove_file(e.path()).map_err(|source| ExportError::Remove {
                        path: e.path(),
                        source,
                    })?;
                    removed += 1;
                }
            }
        }
    }
    Ok(removed)
}

/// An address as 16 bytes (IPv4 mapped) and its IP version.
fn address(a: IpAddr) -> ([u8; 16], i32) {
    match a {
        IpAddr::V4(v4) => (v4.to_ipv6_mapped().octets(), 4),
        IpAddr::V6(v6) => (v6.octets(), 6),
    }
}

/// Nanoseconds as Parquet's signed timestamp (past year 2262: the largest).
fn ts(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// The forward direction of a record.
fn fwd(r: &FlowRecord) -> &Direction {
    &r.forward
}

/// The reverse direction of a record.
fn rev(r: &FlowRecord) -> &Direction {
    &r.reverse
}

/// Buffers of one column's values and definition levels, kept by the sink so that building a
/// column allocates nothing once they have grown to a row group; byte-array values share one
/// buffer (addresses) or static/shared bytes (names), so no value allocates either.
#[derive(Default)]
struct Columns {
    i32s: Vec<i32>,
    i64s: Vec<i64>,
    def: Vec<i16>,
    bytes: Vec<ByteArray>,
    fixed: Vec<FixedLenByteArray>,
    /// The addresses of a column, 16 bytes each, copied into one shared buffer.
    raw: Vec<u8>,
}

impl Columns {
    /// Writes `rows` as one row group, column by column in schema order.
    fn write_row_group(
        &mut self,
        w: &mut SerializedFileWriter<Spool>,
        rows: &[FlowRecord],
        sensor: &str,
    ) -> parquet::errors::Result<()> {
        let mut rg = w.next_row_group()?;
        let mut i = 0;
        while let Some(mut col) = rg.next_column()? {
            self.write_column(&mut col, i, rows, sensor)?;
            col.close()?;
            i += 1;
        }
        rg.close()?;
        Ok(())
    }

    /// Writes an int32 column of `f` of each row.
    fn int32(
        &mut self,
        col: &mut SerializedColumnWriter<'_>,
        rows: &[FlowRecord],
        f: impl Fn(&FlowRecord) -> i32,
    ) -> parquet::errors::Result<()> {
        self.i32s.clear();
        self.i32s.extend(rows.iter().map(f));
        col.typed::<Int32Type>()
            .write_batch(&self.i32s, None, None)
            .map(drop)
    }

    /// Writes an int64 column of `f` of each row.
    fn int64(
        &mut self,
        col: &mut SerializedColumnWriter<'_>,
        rows: &[FlowRecord],
        f: impl Fn(&FlowRecord) -> u64,
    ) -> parquet::errors::Result<()> {
        self.i64s.clear();
        self.i64s.extend(rows.iter().map(|r| ts(f(r))));
        col.typed::<Int64Type>()
            .write_batch(&self.i64s, None, None)
            .map(drop)
    }

    /// Writes a timestamp column of one direction: null for a direction without packets.
    fn time(
        &mut self,
        col: &mut SerializedColumnWriter<'_>,
        rows: &[FlowRecord],
        dir: fn(&FlowRecord) -> &Direction,
        last: bool,
    ) -> parquet::errors::Result<()> {
        self.i64s.clear();
        self.def.clear();
        for r in rows {
            let d = dir(r);
            if d.packets == 0 {
                self.def.push(0);
            } else {
                self.def.push(1);
                self.i64s
                    .push(ts(if last { d.last_ns } else { d.first_ns }));
            }
        }
        col.typed::<Int64Type>()
            .write_batch(&self.i64s, Some(&self.def), None)
            .map(drop)
    }

    /// Writes a 16-byte address column: one buffer for all rows, each value a slice of it.
    fn addr(
        &mut self,
        col: &mut SerializedColumnWriter<'_>,
        rows: &[FlowRecord],
        src: bool,
    ) -> parquet::errors::Result<()> {
        self.raw.clear();
        for r in rows {
            let a = address(if src { r.key.src } else { r.key.dst }).0;
            self.raw.extend_from_slice(&a);
        }
        // one allocation per column; the values share it (reference-counted slices)
        let all = ByteArray::from(std::mem::take(&mut self.raw));
        self.fixed.clear();
        self.fixed
            .extend((0..rows.len()).map(|i| FixedLenByteArray::from(all.slice(i * 16, 16))));
        let res = col
            .typed::<FixedLenByteArrayType>()
            .write_batch(&self.fixed, None, None)
            .map(drop);
        self.fixed.clear();
        res
    }

    /// Writes one of the seven columns of a direction (`j` in their schema order).
    fn direction(
        &mut self,
        col: &mut SerializedColumnWriter<'_>,
        rows: &[FlowRecord],
        j: usize,
        d: fn(&FlowRecord) -> &Direction,
    ) -> parquet::errors::Result<()> {
        match j {
            0 => self.time(col, rows, d, false),
            1 => self.time(col, rows, d, true),
            2 => self.int64(col, rows, |r| d(r).packets),
            3 => self.int64(col, rows, |r| d(r).bytes),
            4 => self.int32(col, rows, |r| d(r).tcp_flags.into()),
            5 => self.int32(col, rows, |r| d(r).min_ttl.into()),
            _ => self.int32(col, rows, |r| d(r).max_ttl.into()),
        }
    }

    /// Writes a string column: `f` gives each row's value (`None`: null, when `optional`).
    fn strings(
        &mut self,
        col: &mut SerializedColumnWriter<'_>,
        rows: &[FlowRecord],
        optional: bool,
        mut f: impl FnMut(&FlowRecord) -> Option<ByteArray>,
    ) -> parquet::errors::Result<()> {
        self.bytes.clear();
        self.def.clear();
        for r in rows {
            match f(r) {
                Some(v) => {
                    self.bytes.push(v);
                    self.def.push(1);
                }
                None => self.def.push(0),
            }
        }
        let def = optional.then_some(&self.def[..]);
        let res = col
            .typed::<ByteArrayType>()
            .write_batch(&self.bytes, def, None)
            .map(drop);
        self.bytes.clear();
        res
    }

    /// Writes column `i` of the schema.
    fn write_column(
        &mut self,
        col: &mut SerializedColumnWriter<'_>,
        i: usize,
        rows: &[FlowRecord],
        sensor: &str,
    ) -> parquet::errors::Result<()> {
        match i {
            0 | 1 => self.direction(col, rows, i, fwd),
            2 => self.int32(col, rows, |r| r.key.vlan.into()),
            3 => self.int32(col, rows, |r| address(r.key.src).1),
            4 => self.addr(col, rows, true),
            5 => self.addr(col, rows, false),
            6 => self.int32(col, rows, |r| r.key.proto.into()),
            7 => self.int32(col, rows, |r| r.key.src_port.into()),
            8 => self.int32(col, rows, |r| r.key.dst_port.into()),
            9 => self.int32(col, rows, |r| r.key.tos.into()),
            10..=14 => self.direction(col, rows, i - 8, fwd),
            15..=21 => self.direction(col, rows, i - 15, rev),
            22 => {
                // the five names, made once per row group; each row shares one
                let names: [ByteArray; 5] = [
                    EndReason::IdleTimeout,
                    EndReason::ActiveTimeout,
                    EndReason::EndOfFlow,
                    EndReason::ForcedEnd,
                    EndReason::LackOfResources,
                ]
                .map(|e| ByteArray::from(end_reason_name(e)));
                self.strings(col, rows, false, |r| {
                    Some(names[end_reason_index(r.end_reason)].clone())
                })
            }
            23 => {
                // a tag is a small number: the decimal text, into one reused string
                let mut text = String::new();
                self.strings(col, rows, true, |r| {
                    r.tag.map(|t| {
                        use std::fmt::Write;
                        text.clear();
                        let _ = write!(text, "{t}");
                        ByteArray::from(text.as_str())
                    })
                })
            }
            _ => {
                let name = ByteArray::from(sensor);
                self.strings(col, rows, false, |_| Some(name.clone()))
            }
        }
    }
}

/// The position of an end reason in the names of column 22.
fn end_reason_index(e: EndReason) -> usize {
    match e {
        EndReason::IdleTimeout => 0,
        EndReason::ActiveTimeout => 1,
        EndReason::EndOfFlow => 2,
        EndReason::ForcedEnd => 3,
        EndReason::LackOfResources => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::path::Path;
    use weir_flows::FlowKey;

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

    /// A scratch directory of this test process, emptied first (a killed run may have left it).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-parquet-{name}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Five-minute files of `sensor` under `dir`.
    fn output(dir: &Path, sensor: &str, sync: bool) -> ParquetOutput {
        ParquetOutput {
            dir: dir.to_path_buf(),
            interval_ns: DEFAULT_INTERVAL_NS,
            sensor: sensor.into(),
            sync,
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
        let dir = scratch("");
        let out = output(&dir, "s1", true);
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
        assert_eq!((st.records, st.files), (3, 2));
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

    /// The columns of [`DELTA_COLUMNS`] are delta-encoded and not compressed, the addresses
    /// zstd-compressed, the low-cardinality ones dictionary-encoded; the values read back (the
    /// parquet crate's own reader) are the records' (times, ports and counters of `rec`, set
    /// by hand above, and a null reverse start for a direction without packets; the reader
    /// gives ns timestamps as plain longs).
    #[test]
    fn delta_columns_are_uncompressed_and_read_back_exact() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::record::Field;
        let dir = scratch("enc-");
        let out = output(&dir, "s1", false);
        let mut s = ParquetSink::open(&out).unwrap();
        let n = 300u64;
        for i in 0..n {
            let mut r = rec(T0 + i * 1_000_000);
            r.key.src_port = 1024 + i as u16;
            r.forward.bytes = 1000 * i;
            s.export(&r).unwrap();
        }
        assert_eq!(s.finish().unwrap().files, 1);
        let path = dir.join(&files(&dir)[0]);
        let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let rg = reader.metadata().row_group(0);
        assert_eq!(rg.num_rows(), n as i64);
        for c in rg.columns() {
            let name = c.column_path().string();
            let (delta, dict) = (
                DELTA_COLUMNS.contains(&name.as_str()),
                DICTIONARY_COLUMNS.contains(&name.as_str()),
            );
            let encodings: Vec<Encoding> = c.encodings().collect();
            if delta {
                assert_eq!(c.compression(), Compression::UNCOMPRESSED, "{name}");
                assert!(
                    encodings.contains(&Encoding::DELTA_BINARY_PACKED),
                    "{name}: {encodings:?}"
                );
            } else if dict {
                assert_eq!(c.compression(), Compression::UNCOMPRESSED, "{name}");
            } else {
                assert!(name.ends_with("IPAddress"), "{name}");
                assert!(matches!(c.compression(), Compression::ZSTD(_)), "{name}");
            }
        }
        assert_eq!(DELTA_COLUMNS.len() + DICTIONARY_COLUMNS.len() + 2, 25);
        for (i, row) in reader.get_row_iter(None).unwrap().enumerate() {
            let row = row.unwrap();
            let get = |k: &str| {
                row.get_column_iter()
                    .find(|(n, _)| n.as_str() == k)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            let at = T0 + i as u64 * 1_000_000;
            assert_eq!(get("flowStartNanoseconds"), Field::Long(at as i64 - 5));
            assert_eq!(get("flowEndNanoseconds"), Field::Long(at as i64));
            assert_eq!(get("sourceTransportPort"), Field::UShort(1024 + i as u16));
            assert_eq!(get("destinationTransportPort"), Field::UShort(80));
            assert_eq!(get("packetDeltaCount"), Field::Long(2));
            assert_eq!(get("octetDeltaCount"), Field::Long(1000 * i as i64));
            assert_eq!(get("reverseFlowStartNanoseconds"), Field::Null);
            assert_eq!(get("reversePacketDeltaCount"), Field::Long(0));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A run killed mid-interval leaves its temporary file; the next run of that sensor
    /// removes it (and counts it), another sensor's is left alone.
    #[test]
    fn a_killed_runs_temporary_file_is_removed_at_the_next_start() {
        let dir = scratch("stale-");
        let out = |sensor: &str| output(&dir, sensor, false);
        let mut s1 = ParquetSink::open(&out("s1")).unwrap();
        s1.export(&rec(T0)).unwrap();
        let mut s2 = ParquetSink::open(&out("s2")).unwrap();
        s2.export(&rec(T0 + 3_600_000_000_000)).unwrap();
        drop((s1, s2)); // killed: no finish
        let left = [
            "date=2026-11-21/hour=10/.s1-20261121T102000Z.parquet.tmp",
            "date=2026-11-21/hour=11/.s2-20261121T112000Z.parquet.tmp",
        ];
        assert_eq!(files(&dir), left);
        let mut again = ParquetSink::open(&out("s1")).unwrap();
        assert_eq!(files(&dir), &left[1..]);
        let st = again.finish().unwrap();
        assert_eq!((st.temp_removed, st.files, st.records), (1, 0, 0));
        assert_eq!(
            ParquetSink::open(&out("s1")).unwrap().stats().temp_removed,
            0
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_clock_going_back_starts_a_new_file() {
        let dir = scratch("back-");
        let out = output(&dir, "s", false);
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
                sync: false,
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
            sync: false,
        };
        assert!(matches!(
            ParquetSink::open(&out),
            Err(ExportError::Unsupported(_))
        ));
    }
}
