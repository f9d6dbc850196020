//! The process's stdin and stdout, each served by one dedicated thread.
//!
//! Tokio's own `stdin()` and `stdout()` run every read and write on the blocking pool: each
//! operation wakes a pool thread, and its completion wakes the task back, so a request and its
//! answer cost four thread wake-ups before the dispatcher does anything. Here one thread blocks
//! in `read(2)` on stdin for the whole session and hands each chunk it reads to the serving
//! loop, and one thread writes every answer to stdout as it arrives: a request costs one wake-up
//! in and one out. The channels between them are bounded, so a client that stops reading still
//! stops the loop from reading (the backpressure of [`crate::serve`]), and memory stays bounded.
//!
//! Neither thread can be interrupted while it blocks in the kernel; the binary does not wait
//! for them at exit (the runtime is shut down in the background and the process ends).

use std::future::Future;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;

/// How many bytes the reader thread asks for per `read(2)`.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// How many chunks may wait between a thread and the serving loop, in each direction.
const QUEUED_CHUNKS: usize = 4;

/// Stdin as an [`AsyncRead`], fed by a thread that reads it (see the module docs).
pub struct ThreadedStdin {
    chunks: mpsc::Receiver<io::Result<Vec<u8>>>,
    current: Vec<u8>,
    consumed: usize,
}

impl ThreadedStdin {
    /// Starts the thread reading the process's stdin.
    ///
    /// # Errors
    ///
    /// The error of spawning the thread.
    pub fn spawn() -> io::Result<ThreadedStdin> {
        ThreadedStdin::spawn_reading(io::stdin())
    }

    /// Starts a thread reading `source` (stdin, or a pipe in tests).
    fn spawn_reading<S: Read + Send + 'static>(mut source: S) -> io::Result<ThreadedStdin> {
        let (sender, chunks) = mpsc::channel(QUEUED_CHUNKS);
        std::thread::Builder::new()
            .name("stdin-reader".to_owned())
            .spawn(move || {
                // One buffer for every read; each chunk sent is a copy of what was read, so a
                // short line does not pin (or zero) a whole buffer.
                let mut buffer = vec![0; READ_CHUNK_BYTES];
                loop {
                    let read = match source.read(&mut buffer) {
                        Ok(0) => return,
                        Ok(read) => read,
                        Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                        Err(err) => {
                            let _ = sender.blocking_send(Err(err));
                            return;
                        }
                    };
                    // The loop is gone when the session ended; nothing is left to read for.
                    if sender.blocking_send(Ok(buffer[..read].to_vec())).is_err() {
                        return;
                    }
                }
            })?;
        Ok(ThreadedStdin {
            chunks,
            current: Vec::new(),
            consumed: 0,
        })
    }
}

impl AsyncRead for ThreadedStdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.consumed == this.current.len() {
            match ready!(this.chunks.poll_recv(cx)) {
                Some(Ok(chunk)) => {
                    this.current = chunk;
                    this.consumed = 0;
                }
                Some(Err(err)) => return Poll::Ready(Err(err)),
                // The thread saw end of input.
                None => return Poll::Ready(Ok(())),
            }
        }
        let available = &this.current[this.consumed..];
        let taken = available.len().min(buf.remaining());
        buf.put_slice(&available[..taken]);
        this.consumed += taken;
        Poll::Ready(Ok(()))
    }
}

/// Stdout as an [`AsyncWrite`], drained by a thread that writes and flushes every buffer it is
/// given, in order (see the module docs).
pub struct ThreadedStdout {
    buffers: PollSender<Vec<u8>>,
    /// Resolves (with an error: its sender is dropped) when the thread has ended.
    finished: oneshot::Receiver<()>,
}

impl ThreadedStdout {
    /// Starts the thread writing the process's stdout.
    ///
    /// # Errors
    ///
    /// The error of spawning the thread.
    pub fn spawn() -> io::Result<ThreadedStdout> {
        ThreadedStdout::spawn_writing(io::stdout())
    }

    /// Starts a thread writing to `sink` (stdout, or a pipe in tests).
    fn spawn_writing<S: Write + Send + 'static>(mut sink: S) -> io::Result<ThreadedStdout> {
        let (sender, mut buffers) = mpsc::channel::<Vec<u8>>(QUEUED_CHUNKS);
        let (ended, finished) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("stdout-writer".to_owned())
            .spawn(move || {
                // Dropped when the thread returns, however it returns.
                let _ended = ended;
                while let Some(buffer) = buffers.blocking_recv() {
                    if let Err(err) = sink.write_all(&buffer).and_then(|()| sink.flush()) {
                        // Dropping the receiver tells the writer side the client is gone.
                        tracing::debug!("stdout closed: {err}");
                        return;
                    }
                }
            })?;
        Ok(ThreadedStdout {
            buffers: PollSender::new(sender),
            finished,
        })
    }
}

fn writer_gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the stdout writer stopped")
}

impl AsyncWrite for ThreadedStdout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.buffers.poll_reserve(cx)).map_err(|_| writer_gone())?;
        this.buffers
            .send_item(buf.to_vec())
            .map_err(|_| writer_gone())?;
        Poll::Ready(Ok(buf.len()))
    }

    /// Returns at once: every buffer the thread takes is written and flushed before the next,
    /// and the bounded queue already holds back a writer that runs ahead of the client.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Closes the queue and waits until the thread has written what was queued and ended, so
    /// the process does not exit with answers still in memory.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.buffers.close();
        // The thread never sends; its end drops the sender, which is all this waits for.
        let _ = ready!(Pin::new(&mut this.finished).poll(cx));
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A slow sink the test can read after the writer thread is done with it: each write takes
    /// a few milliseconds, so buffers are still queued when the last `write_all` returns.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            std::thread::sleep(std::time::Duration::from_millis(3));
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A source that fails after its bytes, as a broken stdin would.
    struct FailsAfter(Cursor<Vec<u8>>);

    impl Read for FailsAfter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match Read::read(&mut self.0, buf)? {
                0 => Err(io::Error::other("stdin broke")),
                read => Ok(read),
            }
        }
    }

    #[tokio::test]
    async fn the_reader_thread_delivers_every_byte_then_end_of_input() {
        let input: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut stdin = ThreadedStdin::spawn_reading(Cursor::new(input.clone())).unwrap();
        let mut read = Vec::new();
        stdin.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, input);
    }

    #[tokio::test]
    async fn a_read_error_reaches_the_loop_after_the_bytes_before_it() {
        let mut stdin =
            ThreadedStdin::spawn_reading(FailsAfter(Cursor::new(b"ok\n".to_vec()))).unwrap();
        let mut read = Vec::new();
        let err = stdin.read_to_end(&mut read).await.unwrap_err();
        assert_eq!(read, b"ok\n");
        assert_eq!(err.to_string(), "stdin broke");
    }

    /// A source whose first read is interrupted by a signal, as `read(2)` on stdin can be.
    struct InterruptedOnce {
        interrupted: bool,
        bytes: Cursor<Vec<u8>>,
    }

    impl Read for InterruptedOnce {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if !self.interrupted {
                self.interrupted = true;
                return Err(io::ErrorKind::Interrupted.into());
            }
            Read::read(&mut self.bytes, buf)
        }
    }

    #[tokio::test]
    async fn an_interrupted_read_is_retried_not_reported() {
        let mut stdin = ThreadedStdin::spawn_reading(InterruptedOnce {
            interrupted: false,
            bytes: Cursor::new(b"ok\n".to_vec()),
        })
        .unwrap();
        let mut read = Vec::new();
        // A signal is not a broken stdin: the loop sees the bytes after it and a clean end.
        stdin.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, b"ok\n");
    }

    /// A source that records how many bytes each read asks for, then ends at once.
    struct RecordsAsks(Arc<Mutex<Vec<usize>>>);

    impl Read for RecordsAsks {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.lock().unwrap().push(buf.len());
            Ok(0)
        }
    }

    #[tokio::test]
    async fn each_read_asks_for_sixty_four_kibibytes() {
        // The point of the reader thread is few wake-ups per message: a large line must arrive
        // in 64 KiB chunks, not in many small reads each handed over on its own.
        let asks = Arc::new(Mutex::new(Vec::new()));
        let mut stdin = ThreadedStdin::spawn_reading(RecordsAsks(Arc::clone(&asks))).unwrap();
        let mut read = Vec::new();
        stdin.read_to_end(&mut read).await.unwrap();
        assert!(read.is_empty());
        assert_eq!(*asks.lock().unwrap(), vec![64 * 1024]);
    }

    #[tokio::test]
    async fn the_writer_thread_writes_every_buffer_in_order() {
        let sink = Shared::default();
        let mut stdout = ThreadedStdout::spawn_writing(sink.clone()).unwrap();
        for i in 0..20 {
            stdout
                .write_all(format!("line {i}\n").as_bytes())
                .await
                .unwrap();
        }
        // Shutting down returns only once the thread has written everything queued.
        stdout.shutdown().await.unwrap();
        let expected: String = (0..20).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            String::from_utf8(sink.0.lock().unwrap().clone()).unwrap(),
            expected
        );
    }

    #[tokio::test]
    async fn a_failed_stdout_is_a_broken_pipe_for_the_loop() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut stdout = ThreadedStdout::spawn_writing(Closed).unwrap();
        // The first buffer is accepted into the queue; once the thread failed on it, writes
        // are refused (bounded: the queue holds a few buffers at most).
        let mut refused = None;
        for _ in 0..1_000 {
            if let Err(err) = stdout.write_all(b"x\n").await {
                refused = Some(err);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(
            refused.expect("writes still accepted").kind(),
            io::ErrorKind::BrokenPipe
        );
    }
}
