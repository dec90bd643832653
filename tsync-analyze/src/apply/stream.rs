//! The user's files as streams: standard input for `-`, gzip recognized by its magic bytes (the
//! Collector and log shippers compress), and a gzip output when the name asks for it.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

use flate2::Compression;
use flate2::bufread::MultiGzDecoder;
use flate2::write::GzEncoder;

/// Read buffers: large, as the files are.
const BUFFER: usize = 1 << 20;

/// Opens `path` (`-`: standard input) for reading, decompressing it if it starts with gzip's
/// magic bytes (every member of a multi-member file, as `cat a.gz b.gz` makes).
pub fn open(path: &Path) -> io::Result<Box<dyn BufRead + Send>> {
    let raw: Box<dyn BufRead + Send> = if path == Path::new("-") {
        Box::new(BufReader::with_capacity(BUFFER, io::stdin()))
    } else {
        Box::new(BufReader::with_capacity(BUFFER, File::open(path)?))
    };
    gunzip_if_gzip(raw)
}

/// `r` itself, or its decompression when it starts with gzip's magic bytes (1f 8b).
pub fn gunzip_if_gzip(mut r: Box<dyn BufRead + Send>) -> io::Result<Box<dyn BufRead + Send>> {
    let head = r.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            BUFFER,
            MultiGzDecoder::new(r),
        )))
    } else {
        Ok(r)
    }
}

/// Where a result goes: as is, or gzip-compressed (an output named `*.gz`).
pub enum Sink<W: Write> {
    /// Written as is.
    Plain(W),
    /// Compressed.
    Gzip(GzEncoder<W>),
}

impl<W: Write> Sink<W> {
    /// Compresses when `name` ends in `.gz`.
    pub fn new(inner: W, name: &Path) -> Self {
        if name
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
        {
            Sink::Gzip(GzEncoder::new(inner, Compression::default()))
        } else {
            Sink::Plain(inner)
        }
    }

    /// Writes gzip's trailer (if compressing) and flushes; gives the writer back.
    pub fn finish(self) -> io::Result<W> {
        let mut w = match self {
            Sink::Plain(w) => w,
            Sink::Gzip(g) => g.finish()?,
        };
        w.flush()?;
        Ok(w)
    }
}

impl<W: Write> Write for Sink<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(g) => g.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(buf),
            Sink::Gzip(g) => g.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(g) => g.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_recognized_and_written_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl.gz");
        let mut sink = Sink::new(File::create(&path).unwrap(), &path);
        sink.write_all(b"{\"a\":1}\n").unwrap();
        sink.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap()[..2], [0x1f, 0x8b]);
        // Two members, as `cat a.gz b.gz` makes.
        let mut twice = std::fs::read(&path).unwrap();
        twice.extend(std::fs::read(&path).unwrap());
        std::fs::write(&path, twice).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut open(&path).unwrap(), &mut text).unwrap();
        assert_eq!(text, "{\"a\":1}\n{\"a\":1}\n");
        let plain = dir.path().join("b.jsonl");
        std::fs::write(&plain, "x\n").unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut open(&plain).unwrap(), &mut text).unwrap();
        assert_eq!(text, "x\n");
    }
}
