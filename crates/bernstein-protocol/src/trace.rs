//! W3C Trace Context: the `traceparent`, `tracestate` and `baggage` values a host sends in a
//! request's `_meta`, which the server forwards to a task server, records on artifact lineage,
//! and honours for its own trace and span ids.

/// The three W3C trace-context values of one request, as received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    /// The `traceparent` value.
    pub traceparent: Option<String>,
    /// The `tracestate` value.
    pub tracestate: Option<String>,
    /// The `baggage` value.
    pub baggage: Option<String>,
}

impl TraceContext {
    /// The values that are present and non-empty, as `(name, value)` in the order above. An
    /// empty value counts as absent, as in the reference (`if traceparent:`).
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("traceparent", self.traceparent.as_deref()),
            ("tracestate", self.tracestate.as_deref()),
            ("baggage", self.baggage.as_deref()),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.filter(|v| !v.is_empty()).map(|v| (name, v)))
    }

    /// Whether no value is present.
    pub fn is_empty(&self) -> bool {
        self.fields().next().is_none()
    }
}

/// A parsed `traceparent`: `vv-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// The 32-hex-digit trace id.
    pub trace_id: String,
    /// The 16-hex-digit parent (span) id.
    pub parent_id: String,
}

/// Parses a `traceparent` as W3C Trace Context level 1 defines it: lowercase hex, version not
/// `ff`, neither id all zeros; version `00` has exactly four fields, a later version may append
/// more after a `-`. `None` for anything else.
pub fn parse_traceparent(text: &str) -> Option<TraceParent> {
    let mut parts = text.split('-');
    let (version, trace_id, parent_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let extra = parts.next().is_some();
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let all_zero = |s: &str| s.bytes().all(|b| b == b'0');
    let valid = lower_hex(version, 2)
        && version != "ff"
        && !(version == "00" && extra)
        && lower_hex(trace_id, 32)
        && lower_hex(parent_id, 16)
        && lower_hex(flags, 2)
        && !all_zero(trace_id)
        && !all_zero(parent_id);
    valid.then(|| TraceParent {
        trace_id: trace_id.to_owned(),
        parent_id: parent_id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(text: &str, valid: bool) {
        assert_eq!(parse_traceparent(text).is_some(), valid, "{text:?}");
    }

    #[test]
    fn traceparent_shapes() {
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            true,
        );
        check(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future",
            true,
        );
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            false,
        );
        check(
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            false,
        );
        check(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            false,
        );
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            false,
        );
        check(
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            false,
        );
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            false,
        );
        check("", false);
    }

    #[test]
    fn empty_values_count_as_absent() {
        let trace = TraceContext {
            traceparent: Some(String::new()),
            tracestate: None,
            baggage: Some("k=v".into()),
        };
        assert_eq!(trace.fields().collect::<Vec<_>>(), [("baggage", "k=v")]);
        assert!(TraceContext::default().is_empty());
    }
}
