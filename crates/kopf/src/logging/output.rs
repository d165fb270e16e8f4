//! Where log lines go: a thread of their own writes them to stderr, so that a slow reader
//! of the operator's output (a full pipe) never stalls the runtime's threads, and the lines
//! logged meanwhile go out together, in one write. Nothing is dropped: with
//! [`WAITING`] lines waiting, logging waits. [`flush`] waits until every line logged so far
//! is written (the operator calls it before it exits, through
//! [`super::flush`]).
//!
//! Not `tracing-appender`'s `non_blocking`: its `WorkerGuard` flushes only when dropped,
//! which also ends the writing thread, while `flush_lines` waits for the lines so far and
//! logging goes on (`kopf::logging::flush()` is public and may be called more than once,
//! e.g. at the second stop signal and again at exit); the guard's wait is fixed at one
//! second where ours is two; and tracing-appender is not in the lock.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// Lines waiting to be written beyond which logging waits for the writing thread.
const WAITING: usize = 4096;
/// Bytes written at most in one write.
const BATCH: usize = 64 * 1024;

enum Message {
    Line(Vec<u8>),
    Flush(SyncSender<()>),
}

/// The writing thread's queue (None: the thread could not start; lines are written where
/// they are logged).
static OUTPUT: OnceLock<Option<SyncSender<Message>>> = OnceLock::new();

fn output() -> Option<&'static SyncSender<Message>> {
    OUTPUT
        .get_or_init(|| spawn(|| std::io::stderr().lock()))
        .as_ref()
}

/// Starts a writing thread that writes to what `sink` gives, each time it has lines.
fn spawn<W: Write>(sink: impl Fn() -> W + Send + 'static) -> Option<SyncSender<Message>> {
    let (tx, rx) = mpsc::sync_channel(WAITING);
    std::thread::Builder::new()
        .name("kopf-log".into())
        .spawn(move || write_lines(rx, sink))
        .ok()
        .map(|_| tx)
}

fn write_lines<W: Write>(rx: Receiver<Message>, sink: impl Fn() -> W) {
    let mut out = Vec::with_capacity(BATCH);
    let mut acks = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Line(line) => out.extend_from_slice(&line),
                Message::Flush(ack) => acks.push(ack),
            }
            if out.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !out.is_empty() {
            let mut sink = sink();
            let _ = sink.write_all(&out);
            let _ = sink.flush();
            out.clear();
        }
        for ack in acks.drain(..) {
            let _ = ack.send(());
        }
    }
}

/// The log layer's writer: each line goes to the writing thread.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line(Vec::new())
    }
}

/// One formatted event, sent when dropped.
pub(crate) struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let line = std::mem::take(&mut self.0);
        if line.is_empty() {
            return;
        }
        let unsent = match output() {
            Some(tx) => match tx.send(Message::Line(line)) {
                Ok(()) => return,
                Err(mpsc::SendError(Message::Line(line))) => line,
                Err(_) => return,
            },
            None => line,
        };
        let _ = std::io::stderr().lock().write_all(&unsent);
    }
}

/// Waits (up to 2 s) until every line logged so far is written to stderr.
pub(crate) fn flush_lines() {
    if let Some(tx) = OUTPUT.get().and_then(Option::as_ref) {
        flush_to(tx);
    }
}

/// Whether the thread of `tx` wrote the lines sent before, within 2 s.
fn flush_to(tx: &SyncSender<Message>) -> bool {
    let (ack, done) = mpsc::sync_channel(1);
    tx.send(Message::Flush(ack)).is_ok() && done.recv_timeout(Duration::from_secs(2)).is_ok()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut sink = self.0.lock().unwrap_or_else(|e| e.into_inner());
            sink.0.extend_from_slice(buf);
            sink.1 += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_logged_meanwhile_go_out_in_order_in_one_write_and_a_flush_waits_for_them() {
        let sink = Sink::default();
        let out = sink.clone();
        // The first write waits until every line is queued (as behind a full pipe).
        let (release, released) = mpsc::channel::<()>();
        let released = Mutex::new(Some(released));
        let tx = spawn(move || {
            if let Some(rx) = released.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = rx.recv();
            }
            out.clone()
        })
        .expect("a thread");
        let lines = WAITING;
        for i in 0..lines {
            tx.send(Message::Line(format!("line {i}\n").into_bytes()))
                .expect("sent");
        }
        release.send(()).expect("released");
        assert!(flush_to(&tx), "the flush is acknowledged");
        let (text, writes) = sink.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let text = String::from_utf8(text).expect("utf-8");
        let expected: String = (0..lines).map(|i| format!("line {i}\n")).collect();
        assert!(text == expected, "every line, in order");
        assert!(writes <= 2, "{writes} writes for {lines} lines");
    }
}
