//! The file job's outputs: where rows and late events are written, how the files become
//! final ([`Delivery`]), what a failed run leaves ([`FileIo::fail`]), and the file
//! job's side of the driver loop ([`FileIo`], an [`Io`]).

use std::path::{Path, PathBuf};

use super::{HaltPoint, JobConfig};
use crate::checkpoint::{FilePosition, Front};
use crate::driver::Io;
use crate::error::{Error, Result};
use crate::operator::over::Outcome;
use crate::source::{is_stream, Sink, Source};
use crate::value::{Event, Row, Schema};

/// `<stem>.partial.<ext>` next to `path` (`<name>.partial` without an extension): where
/// a run without checkpoints writes a file before renaming it to `path` at the end (the
/// extension is kept, so the format is the same).
pub fn partial_path(path: &Path) -> PathBuf {
    let name = match (path.file_stem(), path.extension()) {
        (Some(stem), Some(ext)) => {
            format!("{}.partial.{}", stem.to_string_lossy(), ext.to_string_lossy())
        }
        _ => format!(
            "{}.partial",
            path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy())
        ),
    };
    path.with_file_name(name)
}

/// Lengths of the output files at a checkpoint (the prefix a resume continues from).
#[derive(Clone, Copy, Debug)]
pub(super) struct Cut {
    /// Input events the checkpoint covers.
    pub(super) events: u64,
    pub(super) output_len: u64,
    pub(super) side_len: u64,
}

/// How the job's output files become final.
#[derive(Clone, Copy, Debug)]
pub(super) enum Delivery {
    /// No checkpoints: the output and the side output are written to
    /// [`partial_path`]s and renamed to their names when the run succeeds, so a failed
    /// run never leaves a file that looks complete under the final name.
    Staged,
    /// Checkpoints: the files are written in place (a resume appends to them); a failed
    /// run cuts them back to the last checkpoint, so what is left is exactly the prefix
    /// `--resume` continues from (`None`: no checkpoint yet, cut to nothing).
    InPlace(Option<Cut>),
}

/// The side output's path when `--side-output` is not given: `<output>.late.<ext>`
/// next to an output file, `late-events.csv` for stdout or an output that is not a
/// regular file (no `/dev/null.late.csv` next to a device).
pub(super) fn default_side_output(output: Option<&Path>) -> PathBuf {
    match output {
        Some(p) if !is_stream(p) => {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("csv");
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("output");
            p.with_file_name(format!("{stem}.late.{ext}"))
        }
        _ => PathBuf::from("late-events.csv"),
    }
}

/// Where a run writes `path` before it is final: its [`partial_path`] when the run is
/// [`Delivery::Staged`] and `path` is a regular file or does not exist yet; `path`
/// itself with checkpoints, and for stdout, FIFOs and devices, which are written in
/// place (a rename would replace the device node or FIFO with a regular file).
pub(super) fn write_path(delivery: Delivery, path: &Path) -> PathBuf {
    match delivery {
        Delivery::Staged if !is_stream(path) => partial_path(path),
        _ => path.to_path_buf(),
    }
}

/// Renames a finished staged file to its final name.
fn publish(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| {
        Error::Config(format!(
            "cannot rename the finished output {} to {}: {e} (the complete output is in {})",
            from.display(),
            to.display(),
            from.display()
        ))
    })
}

/// After a failed run (sinks dropped, so flushed): leaves the output files as
/// [`Delivery`] promises and says what became of them, naming the paths. `sink_rows`
/// is the rows the output sink wrote (`None`: no sink), `side` the side output and its
/// rows, if it was created. A staged file that got no row is removed rather than left
/// holding only a header, and the message says that no rows were written.
fn settle_failed_outputs(
    cfg: &JobConfig,
    delivery: Delivery,
    sink_rows: Option<u64>,
    side: Option<(&Path, u64)>,
) -> String {
    let output = match (&cfg.output, cfg.discard_output, sink_rows) {
        (Some(p), false, Some(rows)) => Some((p.as_path(), rows)),
        _ => None,
    };
    let mut notes = Vec::new();
    match delivery {
        Delivery::Staged => {
            for (p, rows) in output.into_iter().chain(side) {
                let written = write_path(Delivery::Staged, p);
                if written == p {
                    notes.push(if rows == 0 {
                        format!("no rows were written to {} before the error", p.display())
                    } else {
                        format!(
                            "the {rows} rows before the error were written to {} (not a \
                             regular file, so written in place)",
                            p.display()
                        )
                    });
                    continue;
                }
                let kept = if p.exists() { "left unchanged" } else { "not written" };
                if rows == 0 {
                    let _ = std::fs::remove_file(&written);
                    notes.push(format!(
                        "{} was {kept}: the error came before any row was written",
                        p.display()
                    ));
                } else {
                    notes.push(format!(
                        "{} was {kept}: the {rows} rows before the error are in {} (incomplete)",
                        p.display(),
                        written.display()
                    ));
                }
            }
            if let (None, Some(rows), false) = (&cfg.output, sink_rows, cfg.discard_output) {
                notes.push(format!("the {rows} rows before the error were written to stdout"));
            }
        }
        Delivery::InPlace(cut) => {
            let (events, output_len, side_len) =
                cut.map_or((0, 0, 0), |c| (c.events, c.output_len, c.side_len));
            let what = match cut {
                Some(_) => {
                    format!("the output of the first {events} input events (the last checkpoint)")
                }
                None => "nothing (no checkpoint was completed)".to_string(),
            };
            for (p, len) in output
                .map(|(p, _)| (p, output_len))
                .into_iter()
                .chain(side.map(|(p, _)| (p, side_len)))
            {
                if is_stream(p) {
                    notes.push(format!(
                        "the rows before the error were written to {} (not a regular file, so \
                         it cannot be cut back to the last checkpoint)",
                        p.display()
                    ));
                    continue;
                }
                let res = std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)
                    .and_then(|f| f.set_len(len).and_then(|()| f.sync_all()));
                match res {
                    Ok(()) => notes.push(format!(
                        "{} was cut back to {len} bytes, {what}; fix the cause and run again \
                         with --resume to continue from there",
                        p.display()
                    )),
                    Err(e) => notes.push(format!(
                        "{} could not be cut back to the last checkpoint's {len} bytes ({e}): \
                         bytes after them are incomplete; --resume cuts them off",
                        p.display()
                    )),
                }
            }
            if let (None, Some(rows), false) = (&cfg.output, sink_rows, cfg.discard_output) {
                notes.push(format!("the {rows} rows before the error were written to stdout"));
            }
        }
    }
    if notes.is_empty() {
        "no output file was written".into()
    } else {
        notes.join("; ")
    }
}

/// The [`HaltPoint`]: flushes every output file, creates the marker and sleeps.
fn halt(h: &HaltPoint, io: &mut FileIo) -> Result<()> {
    io.flush()?;
    std::fs::write(&h.marker, h.events.to_string()).map_err(|e| {
        Error::Config(format!("cannot create the halt marker {}: {e}", h.marker.display()))
    })?;
    std::thread::sleep(std::time::Duration::from_secs(600));
    Err(Error::Config(format!(
        "halted after {} events (marker {}) and was not killed within 10 minutes",
        h.events,
        h.marker.display()
    )))
}

/// The file job's side of the driver loop: the source, the output and side-output
/// sinks, and how they become final.
pub(super) struct FileIo {
    pub(super) source: Box<dyn Source>,
    pub(super) sink: Option<Sink>,
    pub(super) side: Option<Sink>,
    /// The input schema (the side output's columns).
    pub(super) schema: Schema,
    /// The side output's final path and where it is written until then.
    pub(super) side_path: PathBuf,
    pub(super) side_write_path: PathBuf,
    /// The output's final path and where it is written (`None`: stdout or discarded).
    pub(super) output_path: Option<PathBuf>,
    pub(super) output_write_path: Option<PathBuf>,
    /// Absolute paths recorded in checkpoints.
    pub(super) output_abs: Option<String>,
    pub(super) side_abs: String,
    pub(super) delivery: Delivery,
    /// The output lengths of the last checkpoint whose outputs are durable.
    pub(super) last_cut: Option<Cut>,
    pub(super) halt: Option<HaltPoint>,
    /// Rows the source had skipped before this run (a resume's), for metrics.
    pub(super) skipped_at_start: u64,
    /// A windowed aggregation: the side output holds one row per missed window (the
    /// event's columns, `window_start`, `window_end`) instead of one per late event.
    pub(super) windowed: bool,
}

impl FileIo {
    /// Flushes and fsyncs every output file and the dead-letter file; returns the
    /// output's and the side output's lengths.
    fn flush(&mut self) -> Result<(u64, u64)> {
        let output_len = match self.sink.as_mut() {
            Some(s) => s.sync()?,
            None => 0,
        };
        let side_len = match self.side.as_mut() {
            Some(s) => s.sync()?,
            None => 0,
        };
        self.source.sync()?;
        Ok((output_len, side_len))
    }

    /// After a successful run: renames staged files to their final names.
    pub(super) fn publish(&self) -> Result<()> {
        if let (Some(from), Some(to), true) =
            (&self.output_write_path, &self.output_path, self.sink.is_some())
        {
            if from != to {
                publish(from, to)?;
            }
        }
        if self.side.is_some() && self.side_write_path != self.side_path {
            publish(&self.side_write_path, &self.side_path)?;
        }
        Ok(())
    }

    /// After a failed run: leaves the files as [`Delivery`] promises and wraps `error`
    /// with what became of them ([`Error::Stopped`]).
    pub(super) fn fail(self, cfg: &JobConfig, error: Error) -> Error {
        let cut = match self.delivery {
            Delivery::Staged => Delivery::Staged,
            Delivery::InPlace(_) => Delivery::InPlace(self.last_cut),
        };
        let sink_rows = self.sink.as_ref().map(Sink::rows);
        let side_rows = self.side.as_ref().map(Sink::rows);
        let side_path = self.side_path.clone();
        drop(self);
        let outputs = settle_failed_outputs(
            cfg,
            cut,
            sink_rows,
            side_rows.map(|rows| (side_path.as_path(), rows)),
        );
        Error::Stopped { error: Box::new(error), outputs }
    }
}

impl Io for FileIo {
    fn next_event(&mut self) -> Result<Option<Event>> {
        Ok(self.source.next_event()?)
    }

    fn emit(&mut self, rows: &mut Vec<Row>, outcome: Outcome) -> Result<()> {
        if let Some(s) = self.sink.as_mut() {
            for r in rows.iter() {
                s.write_row(r)?;
            }
        }
        if let Outcome::TooLate(e) = outcome {
            if self.windowed {
                // Written with its windows by `missed`.
                return Ok(());
            }
            if self.side.is_none() {
                self.side = Some(Sink::create_side_output(&self.side_write_path, &self.schema)?);
            }
            if let Some(s) = self.side.as_mut() {
                s.write_event(&e)?;
            }
        }
        Ok(())
    }

    /// Syncs the files; the cut is recorded as soon as they are durable, before the
    /// store commits: if the commit fails midway, a resume finds this checkpoint or the
    /// one before, and both cover at most these lengths.
    fn sync(&mut self, events: u64) -> Result<Front> {
        let (output_len, side_len) = self.flush()?;
        self.last_cut = Some(Cut { events, output_len, side_len });
        Ok(Front::File(FilePosition {
            source: self.source.position(),
            output: self.output_abs.clone(),
            side_output: self.side_abs.clone(),
            output_len,
            side_len,
        }))
    }

    fn after_event(&mut self, events: u64, _: &mut dyn crate::operator::Operator) -> Result<()> {
        match self.halt.clone() {
            Some(h) if h.events == events => halt(&h, self),
            _ => Ok(()),
        }
    }

    fn missed(&mut self, missed: &crate::operator::windowed::Missed) -> Result<()> {
        if self.side.is_none() {
            self.side = Some(Sink::create_window_side_output(&self.side_write_path, &self.schema)?);
        }
        if let Some(s) = self.side.as_mut() {
            s.write_missed(missed)?;
        }
        Ok(())
    }

    fn malformed(&self) -> u64 {
        self.source.skipped().saturating_sub(self.skipped_at_start)
    }

    fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()> {
        if let Some(s) = self.sink.as_mut() {
            for r in rows.drain(..) {
                s.write_row(&r)?;
            }
        }
        self.flush().map(|_| ())
    }
}
