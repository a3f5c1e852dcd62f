//! `weir ls` (what a store holds: segments, time spans, sizes, packets, drops, index state) and
//! `weir index` (build the index of capture files recorded elsewhere, or rebuild a store's
//! missing or damaged indexes).

use std::path::PathBuf;
use std::time::Instant;

use std::io::Write;

use anyhow::{bail, Context, Result};
use weir_index::{index_path, IndexBuilder, IndexError, DEFAULT_CHUNK};

use weir_store::select::{load_index, open_segment, segments_of, Opened};

use crate::args;
use crate::output::{self, human_bytes, next_or_damaged, Status};
use crate::time::datetime;

/// Arguments of `weir ls`.
#[derive(clap::Args, Debug)]
pub(crate) struct LsArgs {
    /// Store directory.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `weir index`.
#[derive(clap::Args, Debug)]
pub(crate) struct IndexArgs {
    /// Capture files (each gets FILE.idx) or store directories (their segments without a valid
    /// index get one; segments being written are left to the recorder).
    #[arg(required = true, value_name = "FILE|DIR")]
    inputs: Vec<PathBuf>,
    /// Chunk size in KiB, 4 to 1048576.
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_CHUNK / 1024,
          value_parser = clap::value_parser!(u32).range(4..=1 << 20),
          allow_negative_numbers = true)]
    chunk_kib: u32,
    /// Rebuild indexes that look valid too.
    #[arg(long)]
    force: bool,
}

impl IndexArgs {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        args::no_stdin(self.inputs.iter(), "index")
    }
}

fn index_state(path: &std::path::Path) -> (String, u64) {
    let size = std::fs::metadata(index_path(path)).map_or(0, |m| m.len());
    let state = match load_index(path) {
        Ok(ix) => format!("ok ({} keys, {} chunks)", ix.keys(), ix.chunks()),
        Err(IndexError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => "none".into(),
        Err(e) => e.to_string(),
    };
    (state, size)
}

/// Runs `weir ls`. Writes with `?`: a closed stdout ends it quietly (exit 0, see `main`), any
/// other write error is an error naming stdout.
pub(crate) fn ls(args: LsArgs) -> Result<Status> {
    let meta = std::fs::metadata(&args.dir)
        .with_context(|| format!("cannot open {}", args.dir.display()))?;
    if !meta.is_dir() {
        bail!(
            "{} is a file, not a store directory (`weir info` describes capture files)",
            args.dir.display()
        );
    }
    let manifest = weir_store::Manifest::load(&args.dir)
        .with_context(|| format!("cannot read the manifest of {}", args.dir.display()))?
        .with_context(|| format!("{} is not a store (no manifest.json)", args.dir.display()))?;
    let mut rows = Vec::new();
    for s in &manifest.segments {
        let path = args.dir.join(&s.file);
        let (state, index_bytes) = index_state(&path);
        rows.push((s, state, index_bytes));
    }
    let data: u64 = rows.iter().map(|r| r.0.bytes).sum();
    let index: u64 = rows.iter().map(|r| r.2).sum();
    let mut out = std::io::stdout().lock();
    let result = (|| -> std::io::Result<()> {
        if args.json {
            let json = serde_json::json!({
                "format": manifest.format,
                "segment_size": manifest.segment_size,
                "interfaces": manifest.interfaces,
                "bytes": data,
                "index_bytes": index,
                "packets": rows.iter().map(|r| r.0.packets).sum::<u64>(),
                "drops": rows.iter().map(|r| r.0.drops).sum::<u64>(),
                "segments": rows.iter().map(|(s, state, ib)| serde_json::json!({
                    "file": s.file,
                    "state": s.state,
                    "first_ns": s.first_ns,
                    "last_ns": s.last_ns,
                    "packets": s.packets,
                    "bytes": s.bytes,
                    "drops": s.drops,
                    "index_bytes": ib,
                    "index": state,
                })).collect::<Vec<_>>(),
            });
            writeln!(out, "{json:#}")?;
            return out.flush();
        }
        writeln!(
            out,
            "{:<44} {:<9} {:<29} {:<29} {:>10} {:>10} {:>7} {:>10}  index state",
            "segment",
            "state",
            "first packet (UTC)",
            "last packet",
            "packets",
            "bytes",
            "drops",
            "index size"
        )?;
        let t = |v: Option<u64>| v.map_or("-".into(), datetime);
        for (s, state, ib) in &rows {
            writeln!(
                out,
                "{:<44} {:<9} {:<29} {:<29} {:>10} {:>10} {:>7} {:>10}  {}",
                s.file,
                format!("{:?}", s.state).to_lowercase(),
                t(s.first_ns),
                t(s.last_ns),
                s.packets,
                human_bytes(s.bytes),
                s.drops,
                human_bytes(*ib),
                state
            )?;
        }
        writeln!(
            out,
            "{} segment(s), {} packets, {} of data, {} of index ({:.2} % of the data), {} drops",
            rows.len(),
            rows.iter().map(|r| r.0.packets).sum::<u64>(),
            human_bytes(data),
            human_bytes(index),
            index as f64 * 100.0 / data.max(1) as f64,
            rows.iter().map(|r| r.0.drops).sum::<u64>()
        )?;
        out.flush()
    })();
    result.context("cannot write to stdout")?;
    Ok(Status::Clean)
}

/// Runs `weir index`. A store directory: its segments without a valid index get one (all of
/// them with `--force`); the one a running recorder writes is left to it; one left open by a
/// recorder that stopped is indexed as far as it holds whole blocks.
pub(crate) fn index(args: IndexArgs) -> Result<Status> {
    let chunk = args.chunk_kib.max(4) * 1024;
    let mut status = Status::Clean;
    for input in &args.inputs {
        let mut notify = |n| output::notice(&n, false, &mut status);
        let segs = segments_of(std::slice::from_ref(input), &mut notify)?;
        let mut up_to_date = 0;
        for seg in &segs {
            let path = &seg.path;
            if seg.open && seg.live {
                eprintln!(
                    "weir: {}: being written; the recorder indexes it",
                    path.display()
                );
                continue;
            }
            if input.is_dir() && !args.force && !seg.open && load_index(path).is_ok() {
                up_to_date += 1;
                continue;
            }
            if seg.open {
                eprintln!(
                    "weir: {}: left open by a recorder that stopped; indexing what it holds \
                     (`weir record -o` on the store repairs it)",
                    path.display()
                );
            }
            let started = Instant::now();
            let Some(Opened {
                reader: mut r,
                len,
                head,
                ..
            }) = open_segment(seg, &mut |n| output::notice(&n, false, &mut status))?
            else {
                continue;
            };
            let mut b = IndexBuilder::new(chunk);
            let mut covered = 0;
            while let Some(p) = next_or_damaged(&mut r, &mut status)? {
                b.add(p.record_offset, p.meta.ts_ns, p.link, p.data);
                covered = r.offset();
            }
            let bytes = b.serialize(covered.min(len), weir_index::head_hash(&head));
            let out = index_path(path);
            std::fs::write(&out, &bytes)
                .with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!(
                "weir: {}: {} packets indexed in {:.2} s; index {} ({:.2} % of {})",
                path.display(),
                b.packets(),
                started.elapsed().as_secs_f64(),
                human_bytes(bytes.len() as u64),
                bytes.len() as f64 * 100.0 / len.max(1) as f64,
                human_bytes(len)
            );
        }
        if up_to_date > 0 {
            eprintln!(
                "weir: {}: {up_to_date} segment(s) already indexed (--force rebuilds them)",
                input.display()
            );
        } else if segs.is_empty() {
            eprintln!("weir: {}: nothing to index", input.display());
        }
    }
    Ok(status)
}
