//! What one tool call answers.

use bernstein_protocol::pyjson::Value as PyValue;

/// The answer to one `tools/call`, ready for a transport to frame.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// The exact text of the single text content block.
    pub text: String,
    /// `structuredContent`: the parsed envelope (or bare payload) for the structured tools, the
    /// `{"result": <text>}` wrapper for the others, `None` for protocol-level failures such as
    /// an unknown tool.
    pub structured: Option<serde_json::Value>,
    /// `isError`.
    pub is_error: bool,
    /// The call was stopped by its cancellation token; `partial` holds what it had done.
    pub cancelled: bool,
    /// Work done before a cancellation, one chunk per step, in order.
    pub partial: Vec<String>,
    /// The `_meter` object of this call, when the meter is on (and always for a cancelled
    /// call, whose envelope a transport builds around `partial`).
    pub meter: Option<serde_json::Value>,
}

impl ToolOutcome {
    /// A protocol-level error result: `text`, `isError: true`, no structured content.
    pub fn error_text(text: impl Into<String>) -> ToolOutcome {
        ToolOutcome {
            text: text.into(),
            structured: None,
            is_error: true,
            cancelled: false,
            partial: Vec::new(),
            meter: None,
        }
    }

    /// `structuredContent` with the reference's key order, re-read from the text (which is the
    /// same JSON) for the structured tools, or built as `{"result": <text>}` for the others.
    /// `None` when there is no structured content.
    pub fn structured_ordered(&self) -> Option<PyValue> {
        let structured = self.structured.as_ref()?;
        let is_wrapper = structured.as_object().is_some_and(|o| {
            o.len() == 1
                && o.get("result")
                    .is_some_and(|r| r.as_str() == Some(self.text.as_str()))
        });
        if is_wrapper {
            return Some(PyValue::Object(
                bernstein_protocol::pyjson::Object::new().with("result", self.text.as_str()),
            ));
        }
        PyValue::parse(&self.text).ok()
    }
}
