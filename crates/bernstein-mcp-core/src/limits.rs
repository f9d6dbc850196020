//! The resource limits every transport applies, so that a hostile or careless client can waste
//! only its own share of the server.
//!
//! The dispatcher enforces the limits that concern one request (the size of `params`, the calls
//! in flight on a stream and in the process, a hard timeout per request). A transport reads the
//! others from [`crate::Dispatcher::limits`]: how many outgoing messages it queues before it stops
//! reading input, and how long it waits for calls still running when its input ends. stdio and
//! the HTTP transports share one [`Limits`], set on the dispatcher builder.

use std::time::Duration;

/// How much of the server one stream (and the whole process) may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest `params` object accepted, `_meta` and `arguments` included, in bytes of its
    /// compact JSON form. A request beyond it is refused with -32602 before anything runs.
    pub max_params_bytes: usize,
    /// The most requests one stream may have in flight; the next is answered -32603
    /// "server busy" until one settles.
    pub max_in_flight_per_stream: usize,
    /// The most requests the dispatcher (one per process) serves at once, over every stream.
    pub max_in_flight: usize,
    /// The hard timeout of every request. A tool whose schema declares a longer
    /// `timeoutSeconds` gets that plus [`DECLARED_TIMEOUT_GRACE`], so its own timeout answer
    /// wins. A request past it is answered -32603 and its work is dropped.
    pub call_timeout: Duration,
    /// How many outgoing messages a transport queues for a stream before it stops reading that
    /// stream's input (backpressure on a client that does not read its answers). On stdio
    /// every running call holds one place for its answer, so keep it above
    /// `max_in_flight_per_stream`: the stream's input is then still read (a cancel, a ping)
    /// while that many calls run.
    pub outbox_messages: usize,
    /// How long a transport whose input ended waits for the calls still running before it
    /// cancels them.
    pub drain_timeout: Duration,
}

/// What a tool's declared timeout gets on top before the hard timeout cuts it.
pub const DECLARED_TIMEOUT_GRACE: Duration = Duration::from_secs(5);

impl Default for Limits {
    /// 256 KiB of params (four times the firewall's 64 KiB for `arguments`), 32 requests in
    /// flight per stream and 128 per process, a 120 s hard timeout (longer than every declared
    /// timeout, the longest being `bernstein_subscribe`'s 65 s), 64 queued outgoing messages,
    /// and 10 s to finish calls at end of input.
    fn default() -> Limits {
        Limits {
            max_params_bytes: 256 * 1024,
            max_in_flight_per_stream: 32,
            max_in_flight: 128,
            call_timeout: Duration::from_secs(120),
            outbox_messages: 64,
            drain_timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// The hard timeout of a request, given the timeout its tool's schema declares, if any.
    pub fn timeout_for(&self, declared_seconds: Option<f64>) -> Duration {
        let declared = declared_seconds
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .and_then(|d| d.checked_add(DECLARED_TIMEOUT_GRACE));
        match declared {
            Some(declared) => declared.max(self.call_timeout),
            None => self.call_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_timeouts_extend_the_hard_timeout_never_shorten_it() {
        let limits = Limits {
            call_timeout: Duration::from_secs(10),
            ..Limits::default()
        };
        assert_eq!(limits.timeout_for(None), Duration::from_secs(10));
        assert_eq!(limits.timeout_for(Some(1.0)), Duration::from_secs(10));
        assert_eq!(limits.timeout_for(Some(65.0)), Duration::from_secs(70));
        // A value no Duration can hold falls back to the configured bound instead of panicking.
        assert_eq!(limits.timeout_for(Some(1e300)), Duration::from_secs(10));
        assert_eq!(limits.timeout_for(Some(f64::NAN)), Duration::from_secs(10));
        assert!(Limits::default().timeout_for(Some(65.0)) > Duration::from_secs(65));
    }
}
